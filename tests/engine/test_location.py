"""Storage locations (engine/live/location.py): credentials given in a URI reach the S3 client
as given, and never reach what is printed.

Found by a review: a ``+`` in ``secret_key=`` became a space (``urllib.parse.parse_qsl``
decodes HTML forms), so about half of AWS's secret keys were refused; and a secret holding a
``?`` in the user info was printed whole in error messages.
"""

from __future__ import annotations

from urllib.parse import unquote, urlsplit

import pytest

from rmqfs.engine.live.location import credentials_in_user_info, query_pairs, redact

SECRET = "wJalr+XUtnFEMI/K7MDENG+bPxRfi%CY"


def test_a_secret_key_in_the_query_reaches_the_user_info_as_given():
    from urllib.parse import quote

    uri = f"s3://bucket/p?region=x&access_key=AKIA&secret_key={quote(SECRET, safe='+/')}"
    moved = urlsplit(credentials_in_user_info(uri))
    user = moved.netloc.rpartition("@")[0]
    access, _, secret = user.partition(":")
    assert (unquote(access), unquote(secret)) == ("AKIA", SECRET)
    assert moved.query == "region=x"
    assert query_pairs("a=1+2&b=%2B&c=&d") == [("a", "1+2"), ("b", "+"), ("c", ""), ("d", "")]


@pytest.mark.parametrize(
    ("uri", "shown"),
    [
        ("s3://AKIAX:S3CR3T?abc@backups/x?region=us", "s3://***@backups/x?region=us"),
        ("s3://AK:ab/cd@bucket/p?region=x", "s3://***@bucket/p?region=x"),
        ("s3://AK:a#b@bucket/p", "s3://***@bucket/p"),
        (
            f"s3://bucket/p?access_key=AK&secret_key={SECRET}",
            "s3://bucket/p?access_key=***&secret_key=***",
        ),
        ("s3://bucket/p?endpoint_override=a@b", "s3://bucket/p?endpoint_override=a%40b"),
        ("s3://bucket?region=a", "s3://bucket?region=a"),
        ("/local/path", "/local/path"),
    ],
)
def test_redact_hides_the_user_info_and_credential_parameters(uri, shown):
    assert redact(uri) == shown
    assert "S3CR3T" not in redact(uri) and "XUtn" not in redact(uri)
