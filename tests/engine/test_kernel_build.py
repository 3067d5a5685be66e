"""How the compiled decoder is built (engine/read/_kernel_build.py, setup.py's cffi_modules):
the compiler catches a cdef that drifted from _kernel.h (a build or a load that fails), and a
wheel carries the binary, which decodes where no compiler can be found."""

import glob
import os
import shutil
import subprocess
import sys
import sysconfig

import pytest

from rmqfs.engine.read import _kernel_build as kb
from stores import produce

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _build_and_load(tmp_path, cdef):
    """Build the module with ``cdef`` and load it as the kernel does."""
    import importlib.machinery
    import importlib.util

    from rmqfs.engine.read import kernel

    out = str(tmp_path / "out")
    path = kb.build(out, str(tmp_path / "tmp"), kb.make_builder(cdef, absolute=True))
    loader = importlib.machinery.ExtensionFileLoader(kb.MODULE, path)
    spec = importlib.util.spec_from_file_location(kb.MODULE, path, loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return kernel.Kernel(module)


def test_the_cdef_as_it_is_builds_and_loads(tmp_path):
    k = _build_and_load(tmp_path, kb.CDEF)
    assert k.ffi.sizeof("rmq_decode_args") > 0


@pytest.mark.parametrize(
    "old, new, failure",
    [
        # a pointer of another type: the compiler refuses the generated field check
        ("const int64_t *pos;", "const int32_t *pos;", "build"),
        # a field _kernel.h does not have
        ("int32_t max_pairs;", "int32_t max_pairs, extra;", "build"),
        # an integer of another width: cffi compares the compiler's offsets and sizes
        ("    int32_t want;", "    int64_t want;", "load"),
        # a field left out in the middle: the later offsets differ
        ("    int32_t queue_id;\n", "", "load"),
        # a function's argument of another type
        ("int32_t rmq_decode(rmq_decode_args *a);", "int32_t rmq_decode(rmq_strings *a);", "build"),
    ],
)
def test_a_cdef_that_drifted_from_the_header_fails(tmp_path, old, new, failure):
    """One side changed, the other not: never a module that loads and misreads the struct."""
    from cffi import VerificationError

    assert old in kb.CDEF
    cdef = kb.CDEF.replace(old, new)
    if failure == "build":
        with pytest.raises(VerificationError):
            _build_and_load(tmp_path, cdef)
    else:
        with pytest.raises(ImportError, match="rmq_decode_args"):
            _build_and_load(tmp_path, cdef)


def _copy_tree(dst):
    """The project's source (no venv, build products or caches)."""
    ignore = shutil.ignore_patterns(
        ".venv", ".git", "build", "*.egg-info", "*.so", "__pycache__", ".pytest_cache", "*-out"
    )
    shutil.copytree(REPO, dst, ignore=ignore, symlinks=True)


@pytest.mark.wheel
def test_a_wheel_carries_the_kernel_and_decodes_without_a_compiler(tmp_path):
    """`pip wheel .` builds the module into the wheel; installed into a fresh venv (its other
    dependencies taken from this one), rmqfs decodes with it while PATH has no compiler."""
    src = tmp_path / "src"
    _copy_tree(src)
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dist), str(src)],
        check=True,
        capture_output=True,
    )
    (wheel,) = glob.glob(str(dist / "rmqfs-*.whl"))
    import zipfile

    names = zipfile.ZipFile(wheel).namelist()
    assert any(n.startswith("rmqfs/engine/read/_kernel_cffi.") and n.endswith(".so") for n in names)
    # one namespace: nothing of rmqfs at the top of site-packages but rmqfs/ and its metadata
    assert {n.split("/")[0] for n in names} == {"rmqfs", "rmqfs-0.1.0.dist-info"}
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = str(venv / "bin" / "python")
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", py, "install", "-q", "--no-deps", wheel],
        check=True,
        capture_output=True,
    )
    site = subprocess.run(
        [py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    with open(os.path.join(site, "deps.pth"), "w") as f:  # numpy, pyarrow, cffi, ...
        f.write(sysconfig.get_paths()["purelib"] + "\n")
    store = tmp_path / "store"
    produce(store, 50)
    code = (
        "import shutil, sys\n"
        "assert shutil.which('cc') is None and shutil.which('gcc') is None\n"
        "from rmqfs import engine\n"
        "assert engine.__file__.startswith(sys.prefix), engine.__file__\n"
        "for name in ('engine', 'fusefs', 'mount', 'pipeline'):\n"
        "    try:\n"
        "        __import__(name)\n"
        "    except ImportError:\n"
        "        continue\n"
        "    raise AssertionError(f'import {name} resolves')\n"
        "from rmqfs.engine.read import columnar, kernel\n"
        "assert kernel.load() is not None\n"
        "f = columnar.StoreFiles(sys.argv[1])\n"
        "print(sum(b.num_rows for b in f.read_commitlog()))\n"
    )
    env = {"PATH": str(venv / "bin"), "HOME": str(tmp_path), "RMQFS_NO_KERNEL": "0"}
    out = subprocess.run(
        [py, "-c", code, str(store)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["50"]
    assert "not available" not in out.stderr
    # the console script names the namespace's CLI
    out = subprocess.run(
        [str(venv / "bin" / "rmqfs"), "--help"], env=env, capture_output=True, text=True
    )
    assert out.returncode == 0 and "usage: rmqfs" in out.stdout, out.stderr
