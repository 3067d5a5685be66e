"""Every shell example of the filesystem sections of the README and the manual (docs/) works when
pasted into bash, as a new user would, from a checkout next to ``shared/`` with ``.venv``
activated."""

import os
import re
import subprocess
import sys

import pytest

from conftest import REPO, SHARED, SRC_PATH, fuse

pytestmark = [fuse, pytest.mark.fuse]


def doc_blocks(path: str, heading: str) -> list[str]:
    """The unlabelled code blocks of the section ``heading`` (e.g. ``## By hand``) of the markdown
    file ``path``, up to the next heading of its level or above (lines in code blocks that
    start with ``#`` are not headings)."""
    level = len(heading) - len(heading.lstrip("#"))
    lines = (REPO / path).read_text().split("\n")
    start = lines.index(heading) + 1
    body, fence = [], False
    for line in lines[start:]:
        fence ^= line.startswith("```")
        if not fence and re.match(rf"#{{1,{level}}} ", line):
            break
        body.append(line)
    blocks: list[str] = []
    current: list[str] | None = None  # lines of the open unlabelled block
    labelled = False  # inside a block opened with a language (```sh, ```python): skipped
    for line in body:
        if line.startswith("```"):
            if current is not None:  # closes an unlabelled block
                blocks.append("\n".join(current) + "\n")
                current = None
            elif labelled:  # closes a labelled one
                labelled = False
            elif line.strip() == "```":
                current = []
            else:
                labelled = True
        elif current is not None:
            current.append(line)
    return blocks


@pytest.mark.parametrize(
    "sections", [[("README.md", "## By hand"), ("docs/backup.md", "# Backup and restore")]]
)
def test_readme_examples_work_when_pasted(tmp_path, sections):
    work = tmp_path / "checkout"
    (work / ".venv" / "bin").mkdir(parents=True)
    os.symlink(SHARED, tmp_path / "shared")
    # `. .venv/bin/activate` puts an `rmqfs` running this checkout's code on PATH
    rmqfs = work / ".venv" / "bin" / "rmqfs"
    rmqfs.write_text(
        f"#!/bin/sh\nPYTHONPATH='{SRC_PATH}' exec '{sys.executable}' -m rmqfs.mount.cli \"$@\"\n"
    )
    rmqfs.chmod(0o755)
    (work / ".venv" / "bin" / "activate").write_text(f'PATH="{rmqfs.parent}:$PATH"\n')
    scripts = [b for p, h in sections for b in doc_blocks(p, h) if "rmqfs mount" in b]
    assert len(scripts) == len(sections)
    try:
        for script in scripts:
            res = subprocess.run(
                ["bash", "-e", "-c", script], cwd=work, capture_output=True, text=True, timeout=300
            )
            assert res.returncode == 0, (
                f"{script}\n--- stdout\n{res.stdout}\n--- stderr\n{res.stderr}"
            )
            out = res.stdout
            if "mkdir ./mnt/topics/HDFS" in script:
                assert out.count('"topic":"HDFS"') >= 5 and "\n500\n" in out
                assert '"tags":"TagA","keys":["order-1"]' in out
                assert '"queueOffset":7' in out and "\n100\n" in out
                assert '"consumerOffset": 100' in out and "00000000000000000000" in out
            else:  # Backup and restore: snapshot-verify's verdict, then the restored topic
                assert out.splitlines()[-1] == "HDFS", out
                assert out.splitlines()[0].endswith(": OK"), out
                assert (work / "restored" / "commitlog").is_dir()
    finally:
        subprocess.run(["fusermount3", "-u", "-z", str(work / "mnt")], capture_output=True)


def test_the_readmes_cmp_holds_for_a_file_without_a_final_newline(mount_store):
    """README's ``cmp`` of bodies.txt against the input reported a difference for any file
    whose last line has no newline (most loghub files, issue 25): the README's command, run on
    such a file, finds them identical."""
    line = next(x for x in (REPO / "README.md").read_text().splitlines() if x.startswith("cmp "))
    cmd = line.split("#")[0].strip()
    src = SHARED / "data" / "loghub" / "Android_2k.log"
    assert src.read_bytes()[-1:] != b"\n" and b"\n\n" not in src.read_bytes()
    m = mount_store()
    os.mkdir(m.mnt / "topics" / "A")
    (m.mnt / "topics" / "A" / "produce").write_bytes(src.read_bytes())
    cmd = cmd.replace("./mnt/topics/HDFS", str(m.mnt / "topics" / "A")).replace(
        "../shared/data/loghub/HDFS_2k.log", str(src)
    )
    assert str(src) in cmd and str(m.mnt) in cmd, cmd
    res = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True)
    assert res.returncode == 0, (cmd, res.stdout, res.stderr)
