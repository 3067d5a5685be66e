"""The compiled decoder under AddressSanitizer and UndefinedBehaviorSanitizer: `make
sanitize-run` builds it with -fsanitize=address,undefined (every report fatal) and runs the
kernel's tests, the hostile-record tests and the damage fuzzer with it loaded. A hostile store
must never make the C code read or write outside its buffers. A few minutes: marker
``sanitize`` (deselect with -m "not sanitize" while iterating; `make test` runs it)."""

import os
import shutil
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.sanitize
def test_the_kernel_tests_pass_under_asan_and_ubsan():
    if shutil.which("make") is None:
        pytest.fail("make is needed (apt-get install make)")
    venv = os.path.dirname(os.path.dirname(sys.executable))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    out = subprocess.run(
        ["make", "-s", "-C", REPO, "sanitize-run", f"VENV={venv}", f"PY={sys.executable}"],
        env=env,
        capture_output=True,
        text=True,
    )
    tail = (out.stdout + out.stderr)[-6000:]
    assert out.returncode == 0, tail
    assert " passed" in out.stdout and "failed" not in out.stdout, tail
    assert "AddressSanitizer" not in tail and "runtime error" not in tail, tail
