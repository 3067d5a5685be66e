"""``report.html``: the report in one self-contained file an operator can open or mail.

The summary (as printed on stdout), the charts as PNG ``data:`` URIs (base64), and every table
(plain HTML, every value escaped with ``html.escape``). Nothing is loaded from elsewhere: no scripts, no
stylesheets, no fonts, no links to the CSV files next to it. A table longer than
``MAX_ROWS`` shows its first rows and says where the whole table is.
"""

from __future__ import annotations

import base64
import datetime as _dt
import html
import os

import pandas as pd

MAX_ROWS = 1000

#: What each table holds, shown under its heading.
DESCRIPTIONS = {
    "per_queue_tag": "Messages, bytes (whole CommitLog records) and body bytes per broker, "
    "topic, queue and tag.",
    "per_minute": "Messages and bytes per broker, topic and UTC minute of storeTimestamp.",
    "body_size": "Body size in bytes per broker and topic.",
    "body_size_histogram": "Messages per body size bucket (upper bound in bytes, powers of 2).",
    "store_latency": "storeTimestamp - bornTimestamp in ms per broker and topic.",
    "consumer_lag": "brokerOffset - consumerOffset per group, topic and queue.",
    "top_keys": "The KEYS seen most often.",
}

_STYLE = """
body { font-family: sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 2em; }
pre { background: #f6f6f6; padding: .8em; overflow-x: auto; font-size: .85em; }
img { max-width: 100%; border: 1px solid #ddd; }
table { border-collapse: collapse; font-size: .85em; }
th, td { border: 1px solid #ccc; padding: .2em .5em; text-align: left; }
th { background: #eee; } .num { text-align: right; }
.note { color: #8a4b00; } .muted { color: #666; font-size: .9em; }
nav a { margin-right: 1em; }
"""


def png_data_uri(path: str) -> str:
    """The PNG file at ``path`` as a ``data:`` URI (the HTML report holds its charts)."""
    with open(path, "rb") as f:
        return "data:image/png;base64," + base64.b64encode(f.read()).decode("ascii")


def display(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` as the strings shown: integers with thousands separators, floats with one
    decimal, timestamps as ISO UTC, booleans yes/no, lists joined, and missing values empty
    (not "None", "nan" or "<NA>")."""
    out = pd.DataFrame(index=df.index)
    for c in df.columns:
        col = df[c]
        if pd.api.types.is_bool_dtype(col):
            f = lambda v: "yes" if v else "no"  # noqa: E731
        elif pd.api.types.is_integer_dtype(col) and str(c).endswith("Timestamp"):
            f = lambda v: str(int(v))  # noqa: E731 - epoch ms: no separators
        elif pd.api.types.is_integer_dtype(col):
            f = lambda v: f"{int(v):,}"  # noqa: E731
        elif pd.api.types.is_float_dtype(col):
            f = lambda v: f"{v:,.1f}"  # noqa: E731
        elif pd.api.types.is_datetime64_any_dtype(col):
            f = lambda v: v.strftime("%Y-%m-%d %H:%M:%S")  # noqa: E731
        else:
            f = _text
        out[c] = [("" if _missing(v) else f(v)) for v in col]
    return out


def _table(df: pd.DataFrame) -> str:
    """``df`` as an HTML table of escaped :func:`display` strings; numbers right-aligned."""
    num = [
        pd.api.types.is_numeric_dtype(df[c]) and not pd.api.types.is_bool_dtype(df[c])
        for c in df.columns
    ]
    cls = [' class="num"' if n else "" for n in num]
    head = "".join(f"<th{k}>{html.escape(str(c))}</th>" for c, k in zip(df.columns, cls))
    rows = [
        "<tr>" + "".join(f"<td{k}>{html.escape(v)}</td>" for v, k in zip(r, cls)) + "</tr>"
        for r in display(df).itertuples(index=False)
    ]
    return (
        f"<table><thead><tr>{head}</tr></thead><tbody>\n" + "\n".join(rows) + "\n</tbody></table>"
    )


def _text(v: object) -> str:
    return ", ".join(map(str, v)) if isinstance(v, (list, tuple)) else str(v)


def _missing(v: object) -> bool:
    try:
        return v is None or bool(pd.isna(v))
    except (TypeError, ValueError):  # arrays: not missing
        return False


def table_html(name: str, df: pd.DataFrame, max_rows: int = MAX_ROWS) -> str:
    """One table's section: heading, description, the rows (escaped), and a note when cut."""
    parts = [f'<h2 id="{html.escape(name)}">{html.escape(name)}</h2>']
    if name in DESCRIPTIONS:
        parts.append(
            f'<p class="muted">{html.escape(DESCRIPTIONS[name])} '
            f'Also in {html.escape(name)}.csv and {html.escape(name)}.parquet.</p>'
        )
    if name == "store_latency" and "measurable" in df and len(df) and not df["measurable"].all():
        n = int((~df["measurable"].astype(bool)).sum())
        parts.append(
            f'<p class="note">Latency is not measurable for {n} of {len(df)} '
            "topic(s): storeTimestamp - bornTimestamp needs a bornTimestamp set by "
            "the producer, and messages produced through the mount have "
            "bornTimestamp == storeTimestamp. Their percentiles are empty, not 0.</p>"
        )
    if not len(df):
        parts.append("<p>(no rows)</p>")
        return "\n".join(parts)
    shown = df.head(max_rows)
    if len(df) > max_rows:
        parts.append(
            f'<p class="note">First {max_rows:,} of {len(df):,} rows; the whole table '
            f"is in {html.escape(name)}.csv.</p>"
        )
    parts.append(_table(shown))
    return "\n".join(parts)


def render(
    tables: dict[str, pd.DataFrame],
    names: list[str],
    summary: str,
    charts: list[str],
    title: str = "rmqfs report",
) -> str:
    """The whole HTML document: ``summary`` text, ``charts`` (PNG paths, embedded), and the
    ``names`` tables of ``tables`` in that order."""
    when = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    nav = " ".join(f'<a href="#{html.escape(n)}">{html.escape(n)}</a>' for n in names)
    body = [
        f"<h1>{html.escape(title)}</h1>",
        f'<p class="muted">written {when}</p>',
        f"<nav>{nav}</nav>",
        "<h2>Summary</h2>",
        f"<pre>{html.escape(summary)}</pre>",
        "<h2>Charts</h2>",
    ]
    for path in charts:
        name = os.path.basename(path)
        body.append(
            f'<figure><img alt="{html.escape(name)}" src="{png_data_uri(path)}">'
            f"<figcaption class=\"muted\">{html.escape(name)}</figcaption></figure>"
        )
    for name in names:
        body.append(table_html(name, tables[name]))
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head>\n<body>\n"
        + "\n".join(body)
        + "\n</body></html>\n"
    )


def write(
    tables: dict[str, pd.DataFrame],
    names: list[str],
    summary: str,
    charts: list[str],
    out_dir: str,
    filename: str = "report.html",
    title: str = "rmqfs report",
) -> str:
    """Write ``out_dir/filename`` (to a temporary name, then renamed). Returns its path."""
    path = os.path.join(out_dir, filename)
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        f.write(render(tables, names, summary, charts, title))
    os.replace(path + ".tmp", path)
    return path
