"""Workspace in/out: real git, real tar streams built like docker's, no mocks."""

from __future__ import annotations

import io
import os
import stat
import tarfile
from collections.abc import Iterator
from pathlib import Path

import git
import pytest

from harness.errors import HarnessError
from harness.infra.workspace import (
    AGENT_GID,
    AGENT_UID,
    DiffsFromBaseline,
    DiffTooLarge,
    ExtractReport,
    UnsafeArchive,
    apply_patch,
    check_applies,
    compute_diff,
    extract_tree,
    snapshot_baseline,
    workspace_archive,
)

BIG = 1 << 30
# Identity for commits the "agent" makes inside the simulated container.
AGENT_ENV = {
    "GIT_AUTHOR_NAME": "agent",
    "GIT_AUTHOR_EMAIL": "agent@localhost",
    "GIT_COMMITTER_NAME": "agent",
    "GIT_COMMITTER_EMAIL": "agent@localhost",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
}
BINARY = bytes(range(256)) * 40 + b"\x00\x00tail"


# ---------------------------------------------------------------------------------------------
# helpers


def make_task_repo(root: Path) -> Path:
    """A task packet's repo/: text, binary, executable, symlink, nested dir, plus junk to skip."""
    repo = root / "repo"
    (repo / "pkg" / "sub").mkdir(parents=True)
    (repo / "README.md").write_text("hello\n")
    (repo / "pkg" / "mod.py").write_text("def f():\n    return 1\n")
    (repo / "pkg" / "sub" / "data.bin").write_bytes(BINARY)
    (repo / "run.sh").write_text("#!/bin/sh\necho run\n")
    (repo / "run.sh").chmod(0o755)
    (repo / "crlf.txt").write_bytes(b"one\r\ntwo\r\n")
    (repo / "gone.txt").write_text("delete me\n")
    os.symlink("pkg/mod.py", repo / "link_to_mod")
    (repo / ".git").mkdir()
    (repo / ".git" / "HEAD").write_text("ref: refs/heads/secret\n")
    (repo / "pkg" / "__pycache__").mkdir()
    (repo / "pkg" / "__pycache__" / "mod.cpython-311.pyc").write_bytes(b"\x00pyc")
    return repo


def baseline_of(tmp_path: Path) -> Path:
    baseline = tmp_path / "baseline"
    snapshot_baseline(make_task_repo(tmp_path), baseline)
    return baseline


def tree_of(root: Path) -> dict[str, tuple[str, bytes | str, bool]]:
    """Every file and symlink under root (never following links), outside any .git."""
    out: dict[str, tuple[str, bytes | str, bool]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != ".git"]
        for name in [*filenames, *(d for d in dirnames if os.path.islink(Path(dirpath, d)))]:
            path = Path(dirpath, name)
            rel = path.relative_to(root).as_posix()
            if path.is_symlink():
                out[rel] = ("link", os.readlink(path), False)
            else:
                out[rel] = ("file", path.read_bytes(), bool(path.stat().st_mode & stat.S_IXUSR))
    return out


def docker_tar_of(directory: Path) -> bytes:
    """What get_archive('/workspace') yields: members under workspace/, links not followed."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(directory, arcname="workspace")
    return buf.getvalue()


def chunks(data: bytes, size: int = 997) -> Iterator[bytes]:
    for i in range(0, len(data), size):
        yield data[i : i + size]


def crafted_tar(members: list[tuple[str, str, bytes | str]]) -> bytes:
    """Hand-made hostile tars: (name, kind, payload) with kind in file/dir/sym/hard/fifo/chr."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, kind, payload in members:
            info = tarfile.TarInfo(name)
            info.mode = 0o644
            if kind == "file":
                assert isinstance(payload, bytes)
                info.size = len(payload)
                tar.addfile(info, io.BytesIO(payload))
                continue
            info.type = {
                "dir": tarfile.DIRTYPE,
                "sym": tarfile.SYMTYPE,
                "hard": tarfile.LNKTYPE,
                "fifo": tarfile.FIFOTYPE,
                "chr": tarfile.CHRTYPE,
            }[kind]
            if kind in ("sym", "hard"):
                assert isinstance(payload, str)
                info.linkname = payload
            tar.addfile(info)
    return buf.getvalue()


def unpack_workspace(baseline: Path, container: Path) -> None:
    """Do what put_archive('/workspace', ...) does, with a trusted tar of our own."""
    container.mkdir()
    with tarfile.open(fileobj=io.BytesIO(workspace_archive(baseline))) as tar:
        members = tar.getmembers()
        for m in members:
            # Owned by whoever runs the tests, so git (as root) does not flag dubious ownership.
            m.uid, m.gid = os.getuid(), os.getgid()
        tar.extractall(container, members=members, numeric_owner=True)


def roundtrip(
    tmp_path: Path, container: Path, *, max_bytes: int = BIG
) -> tuple[Path, ExtractReport]:
    final = tmp_path / "final"
    report = extract_tree(chunks(docker_tar_of(container)), final, max_bytes=max_bytes)
    return final, report


def assert_patch_reproduces(tmp_path: Path, baseline: Path, patch: bytes, final: Path) -> None:
    check_applies(baseline, patch)
    rebuilt = tmp_path / "rebuilt"
    apply_patch(baseline, patch, rebuilt)
    assert tree_of(rebuilt) == tree_of(final)


# ---------------------------------------------------------------------------------------------
# snapshot and archive


def test_snapshot_skips_git_and_pycache_and_keeps_symlinks(tmp_path: Path) -> None:
    baseline = baseline_of(tmp_path)
    assert not (baseline / ".git").exists()
    assert not (baseline / "pkg" / "__pycache__").exists()
    assert (baseline / "link_to_mod").is_symlink()
    assert os.readlink(baseline / "link_to_mod") == "pkg/mod.py"
    assert (baseline / "run.sh").stat().st_mode & 0o777 == 0o755
    assert (baseline / "pkg" / "sub" / "data.bin").read_bytes() == BINARY
    with pytest.raises(HarnessError, match="already exists"):
        snapshot_baseline(tmp_path / "repo", baseline)


def test_workspace_archive_owned_by_agent_one_commit_deterministic(tmp_path: Path) -> None:
    baseline = baseline_of(tmp_path)
    data = workspace_archive(baseline)

    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        members = tar.getmembers()
    assert members[0].name == "." and members[0].isdir()
    assert all(m.uid == AGENT_UID and m.gid == AGENT_GID for m in members)
    assert all(m.uname == "agent" and m.gname == "agent" for m in members)
    by_name = {m.name: m for m in members}
    assert by_name["run.sh"].mode == 0o755
    assert by_name["README.md"].mode == 0o644
    assert by_name["link_to_mod"].issym() and by_name["link_to_mod"].linkname == "pkg/mod.py"
    assert ".git/HEAD" in by_name
    assert not any("__pycache__" in n for n in by_name)

    container = tmp_path / "container"
    unpack_workspace(baseline, container)
    repo = git.Repo(container)
    assert repo.git.log("--all", "--format=%an <%ae>|%cI|%s").splitlines() == [
        "harness <harness@localhost>|2000-01-01T00:00:00+00:00|baseline"
    ]
    assert repo.git.rev_list("--all", "--count") == "1"
    assert repo.active_branch.name == "main"
    assert repo.git.reflog("--all") == ""
    assert repo.git.status("--porcelain", env=AGENT_ENV) == ""
    assert repo.git.show("HEAD:run.sh") == "#!/bin/sh\necho run"  # gitpython strips the \n
    assert "100755 blob" in repo.git.ls_tree("HEAD", "run.sh")
    assert "120000 blob" in repo.git.ls_tree("HEAD", "link_to_mod")

    # A second snapshot (new inodes, new times) must give the very same bytes.
    again = tmp_path / "again"
    snapshot_baseline(tmp_path / "repo", again)
    assert workspace_archive(again) == data
    assert workspace_archive(baseline) == data


# ---------------------------------------------------------------------------------------------
# extract


def test_extract_round_trip_from_docker_style_tar(tmp_path: Path) -> None:
    baseline = baseline_of(tmp_path)
    final, report = roundtrip(tmp_path, baseline)
    assert tree_of(final) == tree_of(baseline)
    assert report.files == 6 and report.symlinks == 1 and report.dirs == 2
    assert report.bytes == sum(len(v[1]) for v in tree_of(baseline).values() if v[0] == "file")
    assert report.skipped == []


def test_extract_skips_container_git_at_any_depth_and_lookalikes(tmp_path: Path) -> None:
    data = crafted_tar(
        [
            ("workspace", "dir", b""),
            ("workspace/.git", "dir", b""),
            ("workspace/.git/HEAD", "file", b"ref: refs/heads/x\n"),
            ("workspace/.git/objects/ab/cd", "file", b"obj"),
            ("workspace/vendor/lib/.git", "file", b"gitdir: ../../.git/modules/lib\n"),
            ("workspace/vendor/lib/x.py", "file", b"x = 1\n"),
            ("workspace/.GIT/config", "file", b"[core]\n"),
            ("workspace/git~1/config", "file", b"[core]\n"),
            ("workspace/.gitx/ok", "file", b"kept\n"),
        ]
    )
    report = extract_tree(chunks(data), tmp_path / "out", max_bytes=BIG)
    assert sorted(tree_of(tmp_path / "out")) == [".gitx/ok", "vendor/lib/x.py"]
    assert not (tmp_path / "out" / ".git").exists()
    assert ".git/... (container git metadata ignored)" in report.skipped
    assert len([s for s in report.skipped if s.startswith(".git/")]) == 1
    assert any(s.startswith("vendor/lib/.git") for s in report.skipped)
    assert any(s.startswith(".GIT") for s in report.skipped)
    assert any(s.startswith("git~1") for s in report.skipped)


def test_extract_rejects_dotdot_absolute_and_foreign_members(tmp_path: Path) -> None:
    outside = tmp_path / "evil"
    for name in ("workspace/../evil", "workspace/a/../../evil", "/tmp/evil", "other/evil"):
        data = crafted_tar([("workspace", "dir", b""), (name, "file", b"pwned")])
        with pytest.raises(UnsafeArchive):
            extract_tree(chunks(data), tmp_path / f"out{abs(hash(name))}", max_bytes=BIG)
    assert not outside.exists()
    data = crafted_tar([("workspace/ok", "sym", "x"), ("workspace/h", "hard", "../evil")])
    with pytest.raises(UnsafeArchive):
        extract_tree(chunks(data), tmp_path / "hard", max_bytes=BIG)


def test_extract_never_writes_through_symlinks(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "target").write_text("original\n")
    data = crafted_tar(
        [
            ("workspace", "dir", b""),
            # link then a file "inside" it
            ("workspace/a", "sym", str(outside)),
            ("workspace/a/f", "file", b"escaped"),
            # a directory replaced by a link, then written into
            ("workspace/d", "dir", b""),
            ("workspace/d/kept", "file", b"kept"),
            ("workspace/d", "sym", str(outside)),
            ("workspace/d/g", "file", b"escaped"),
            ("workspace/copy", "hard", "workspace/d/kept"),
            # a link replaced by a regular file must not write to the link's target
            ("workspace/p", "sym", str(outside / "target")),
            ("workspace/p", "file", b"replaced"),
            # relative escape as a parent
            ("workspace/up", "sym", "../../outside"),
            ("workspace/up/h", "file", b"escaped"),
        ]
    )
    out = tmp_path / "out"
    report = extract_tree(chunks(data), out, max_bytes=BIG)
    assert sorted(p.name for p in outside.iterdir()) == ["target"]
    assert (outside / "target").read_text() == "original\n"
    assert os.readlink(out / "a") == str(outside)
    assert os.readlink(out / "d") == str(outside)
    assert not (out / "p").is_symlink() and (out / "p").read_bytes() == b"replaced"
    assert os.readlink(out / "up") == "../../outside"
    skipped = "\n".join(report.skipped)
    for rel in ("a/f", "d/g", "up/h", "copy"):
        assert rel in skipped
    assert "symlink" in skipped


def test_extract_hard_links_devices_fifos(tmp_path: Path) -> None:
    data = crafted_tar(
        [
            ("workspace", "dir", b""),
            ("workspace/orig", "file", b"shared"),
            ("workspace/twin", "hard", "workspace/orig"),
            ("workspace/dangling", "hard", "workspace/nowhere"),
            ("workspace/pipe", "fifo", b""),
            ("workspace/dev/null", "chr", b""),
        ]
    )
    out = tmp_path / "out"
    report = extract_tree(chunks(data), out, max_bytes=BIG)
    assert (out / "twin").read_bytes() == b"shared"
    assert (out / "twin").stat().st_nlink == 1  # a copy, not a link
    assert not (out / "pipe").exists() and not (out / "dev" / "null").exists()
    assert not (out / "dangling").exists()
    assert "pipe (fifo)" in report.skipped
    assert "dev/null (device)" in report.skipped
    assert any(s.startswith("dangling") for s in report.skipped)
    assert report.files == 2 and report.bytes == 12


def test_extract_size_cap(tmp_path: Path) -> None:
    data = crafted_tar(
        [("workspace", "dir", b""), ("workspace/a", "file", b"x" * 600),
         ("workspace/b", "file", b"y" * 600)]
    )
    with pytest.raises(DiffTooLarge) as err:
        extract_tree(chunks(data), tmp_path / "out", max_bytes=1000)
    assert "1200" in err.value.problem and "1000" in err.value.problem
    hard = crafted_tar(
        [("workspace", "dir", b""), ("workspace/a", "file", b"x" * 600),
         ("workspace/b", "hard", "workspace/a")]
    )
    with pytest.raises(DiffTooLarge, match=r"1200.*1000"):
        extract_tree(chunks(hard), tmp_path / "out2", max_bytes=1000)


def test_extract_stops_reading_a_stream_past_its_cap(tmp_path: Path) -> None:
    """A sparse file streams its whole apparent size (terabytes from a few bytes of tmpfs),
    and members the extraction skips (.git) are read through all the same: the copy is cut off
    by what it has read, not by what it kept, so it ends in bounded time."""
    header = tarfile.TarInfo("workspace/.git/sparse")
    header.size = 1 << 40  # a 1 TiB `truncate -s 1T .git/sparse`
    pulled = 0

    def endless() -> Iterator[bytes]:
        nonlocal pulled
        root = tarfile.TarInfo("workspace")
        root.type = tarfile.DIRTYPE
        for block in (root.tobuf(), header.tobuf()):
            pulled += len(block)
            yield block
        zeros = bytes(1 << 16)
        while True:
            pulled += len(zeros)
            yield zeros

    with pytest.raises(DiffTooLarge, match="sparse files") as err:
        extract_tree(endless(), tmp_path / "out", max_bytes=1000, max_stream_bytes=1 << 22)
    assert str(1 << 22) in err.value.problem
    assert pulled <= (1 << 22) + (1 << 16)


def test_extract_keeps_exec_bit(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "tool").write_text("#!/bin/sh\n")
    (src / "tool").chmod(0o700)
    (src / "plain").write_text("x\n")
    (src / "plain").chmod(0o600)
    out, _ = roundtrip(tmp_path, src)
    assert (out / "tool").stat().st_mode & 0o777 == 0o755
    assert (out / "plain").stat().st_mode & 0o777 == 0o644


# ---------------------------------------------------------------------------------------------
# diff


def test_no_change_gives_empty_patch(tmp_path: Path) -> None:
    baseline = baseline_of(tmp_path)
    final, _ = roundtrip(tmp_path, baseline)
    patch, result = compute_diff(baseline, final, max_diff_bytes=BIG)
    assert patch == b""
    assert result.bytes == 0 and result.files_changed == [] and result.skipped == []
    check_applies(baseline, patch)


def test_many_diffs_from_one_baseline_are_each_a_fresh_diff(tmp_path: Path) -> None:
    """The mutation analysis diffs one tree edited in place again and again: each diff from
    the shared baseline commit is byte for byte a fresh ``compute_diff``, through edits that
    keep the file's size and modification time and a file one tree added and the next
    removed."""
    baseline = baseline_of(tmp_path)
    tree = tmp_path / "tree"
    apply_patch(baseline, b"", tree)
    mod = tree / "pkg" / "mod.py"
    original = mod.read_bytes()
    stamp = mod.stat()

    def same_size_same_time(text: bytes) -> None:
        assert len(text) == len(original)
        mod.write_bytes(text)
        os.utime(mod, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))

    steps = [
        lambda: same_size_same_time(original.replace(b"1", b"7")),
        lambda: same_size_same_time(original.replace(b"1", b"8")),
        lambda: (tree / "extra.py").write_text("x = 1\n"),
        lambda: (tree / "extra.py").unlink(),
        lambda: same_size_same_time(original),
    ]
    with DiffsFromBaseline(baseline) as diffs:
        seen = []
        for step in steps:
            step()
            shared = diffs.diff(tree, max_diff_bytes=BIG)
            fresh = compute_diff(baseline, tree, max_diff_bytes=BIG)
            assert shared[0] == fresh[0] and shared[1] == fresh[1]
            seen.append(shared[0])
    assert b"+    return 7" in seen[0] and b"+    return 8" in seen[1]
    assert b"extra.py" in seen[2] and b"extra.py" not in seen[3] and seen[4] == b""


def test_host_symlinks_stay_links(tmp_path: Path) -> None:
    baseline = baseline_of(tmp_path)
    container = tmp_path / "container"
    unpack_workspace(baseline, container)
    os.symlink("/etc/passwd", container / "passwd_link")
    os.symlink("../../outside", container / "pkg" / "escape")
    final, _ = roundtrip(tmp_path, container)
    assert os.readlink(final / "passwd_link") == "/etc/passwd"
    assert os.readlink(final / "pkg" / "escape") == "../../outside"

    patch, result = compute_diff(baseline, final, max_diff_bytes=BIG)
    assert result.added == ["passwd_link", "pkg/escape"]
    text = patch.decode()
    assert text.count("new file mode 120000") == 2
    assert "+/etc/passwd" in text and "+../../outside" in text
    assert b"root:" not in patch
    assert_patch_reproduces(tmp_path, baseline, patch, final)


def test_rewritten_container_git_hides_nothing(tmp_path: Path) -> None:
    baseline = baseline_of(tmp_path)
    container = tmp_path / "container"
    unpack_workspace(baseline, container)
    (container / "pkg" / "mod.py").write_text("def f():\n    return 2\n")
    (container / "sneaky.py").write_text("print('hidden')\n")
    # Fake history: a new root commit named "baseline" that already holds the changes, so the
    # container's git reports a clean tree with one commit.
    repo = git.Repo(container)
    repo.git.add("-A", env=AGENT_ENV)
    tree = repo.git.write_tree(env=AGENT_ENV)
    fake = repo.git.commit_tree(tree, "-m", "baseline", env=AGENT_ENV)
    repo.git.update_ref("refs/heads/main", fake, env=AGENT_ENV)
    repo.git.reflog("expire", "--expire=now", "--all", env=AGENT_ENV)
    repo.git.gc("--prune=now", "-q", env=AGENT_ENV)
    assert repo.git.status("--porcelain", env=AGENT_ENV) == ""
    assert repo.git.rev_list("--all", "--count") == "1"

    final, report = roundtrip(tmp_path, container)
    assert ".git/... (container git metadata ignored)" in report.skipped
    assert not (final / ".git").exists()
    patch, result = compute_diff(baseline, final, max_diff_bytes=BIG)
    assert result.added == ["sneaky.py"]
    assert result.modified == ["pkg/mod.py"]
    assert b"+    return 2" in patch and b"+print('hidden')" in patch
    assert_patch_reproduces(tmp_path, baseline, patch, final)


def test_gitignore_planted_by_agent_hides_nothing(tmp_path: Path) -> None:
    baseline = baseline_of(tmp_path)
    container = tmp_path / "container"
    unpack_workspace(baseline, container)
    (container / ".gitignore").write_text("*\n")
    (container / "pkg" / ".gitignore").write_text("*\n!.gitignore\n")
    (container / "new.py").write_text("x = 1\n")
    (container / "pkg" / "new2.py").write_text("y = 2\n")
    (container / "README.md").write_text("changed\n")
    (container / ".git" / "info").mkdir(exist_ok=True)
    (container / ".git" / "info" / "exclude").write_text("*\n")
    final, _ = roundtrip(tmp_path, container)
    patch, result = compute_diff(baseline, final, max_diff_bytes=BIG)
    assert result.added == [".gitignore", "new.py", "pkg/.gitignore", "pkg/new2.py"]
    assert result.modified == ["README.md"]
    assert_patch_reproduces(tmp_path, baseline, patch, final)


def test_gitattributes_planted_by_agent_does_not_alter_content(tmp_path: Path) -> None:
    baseline = baseline_of(tmp_path)
    container = tmp_path / "container"
    unpack_workspace(baseline, container)
    (container / ".gitattributes").write_text(
        "* text eol=crlf\n*.py ident filter=evil\n*.md binary\n*.txt working-tree-encoding=UTF-16\n"
    )
    (container / "pkg" / "mod.py").write_bytes(b"# $Id$\ndef f():\n    return 3\n")
    (container / "lf.txt").write_bytes(b"a\nb\n")
    (container / "README.md").write_bytes(b"hello\nmore\n")
    final, _ = roundtrip(tmp_path, container)
    patch, result = compute_diff(baseline, final, max_diff_bytes=BIG)
    assert result.modified == ["README.md", "pkg/mod.py"]
    assert "crlf.txt" not in result.files_changed
    assert b"\r\n" not in patch.replace(b"one\r\ntwo\r\n", b"")
    assert b"+more\n" in patch  # README stays a text diff despite `binary`
    assert b"+# $Id$\n" in patch
    assert_patch_reproduces(tmp_path, baseline, patch, final)
    rebuilt = tmp_path / "rebuilt"
    assert (rebuilt / "lf.txt").read_bytes() == b"a\nb\n"
    assert (rebuilt / "crlf.txt").read_bytes() == b"one\r\ntwo\r\n"


def test_binary_changes_round_trip(tmp_path: Path) -> None:
    baseline = baseline_of(tmp_path)
    container = tmp_path / "container"
    unpack_workspace(baseline, container)
    (container / "pkg" / "sub" / "data.bin").write_bytes(BINARY[::-1] + b"\xff\x00")
    (container / "new.bin").write_bytes(os.urandom(5000))
    (container / "empty").write_bytes(b"")
    (container / "link_to_mod").unlink()
    (container / "link_to_mod").write_bytes(b"now a file\x00")
    final, _ = roundtrip(tmp_path, container)
    patch, result = compute_diff(baseline, final, max_diff_bytes=BIG)
    assert b"GIT binary patch" in patch
    assert result.added == ["empty", "new.bin"]
    assert "link_to_mod" in result.files_changed and "pkg/sub/data.bin" in result.modified
    assert_patch_reproduces(tmp_path, baseline, patch, final)


def test_deletion_and_exec_bit_show_in_diff(tmp_path: Path) -> None:
    baseline = baseline_of(tmp_path)
    container = tmp_path / "container"
    unpack_workspace(baseline, container)
    (container / "gone.txt").unlink()
    (container / "README.md").chmod(0o755)
    (container / "run.sh").chmod(0o644)
    final, _ = roundtrip(tmp_path, container)
    patch, result = compute_diff(baseline, final, max_diff_bytes=BIG)
    text = patch.decode()
    assert result.deleted == ["gone.txt"]
    assert result.modified == ["README.md", "run.sh"]
    assert "deleted file mode 100644" in text
    assert "diff --git a/README.md b/README.md\nold mode 100644\nnew mode 100755" in text
    assert "diff --git a/run.sh b/run.sh\nold mode 100755\nnew mode 100644" in text
    assert_patch_reproduces(tmp_path, baseline, patch, final)
    assert (tmp_path / "rebuilt" / "README.md").stat().st_mode & 0o777 == 0o755


def test_final_tree_cache_dirs_and_nested_git_left_out(tmp_path: Path) -> None:
    baseline = baseline_of(tmp_path)
    final = tmp_path / "final"
    snapshot_baseline(baseline, final)
    (final / "pkg" / "__pycache__").mkdir()
    (final / "pkg" / "__pycache__" / "mod.pyc").write_bytes(b"\x00" * 100)
    (final / "vendor" / ".git").mkdir(parents=True)
    (final / "vendor" / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (final / "vendor" / "lib.py").write_text("z = 0\n")
    patch, result = compute_diff(baseline, final, max_diff_bytes=BIG)
    assert result.files_changed == ["vendor/lib.py"]  # a file, not a gitlink
    assert b"Subproject" not in patch
    assert any("__pycache__" in s for s in result.skipped)
    assert any(s.startswith("vendor/.git") for s in result.skipped)


def test_diff_size_cap(tmp_path: Path) -> None:
    baseline = baseline_of(tmp_path)
    final = tmp_path / "final"
    snapshot_baseline(baseline, final)
    (final / "big.txt").write_text("line\n" * 1000)
    _, result = compute_diff(baseline, final, max_diff_bytes=BIG)
    with pytest.raises(DiffTooLarge) as err:
        compute_diff(baseline, final, max_diff_bytes=100)
    assert str(result.bytes) in err.value.problem and "100 bytes" in err.value.problem
    assert err.value.fix


def test_check_applies_good_and_corrupt(tmp_path: Path) -> None:
    baseline = baseline_of(tmp_path)
    final = tmp_path / "final"
    snapshot_baseline(baseline, final)
    (final / "README.md").write_text("hello\nworld\n")
    patch, _ = compute_diff(baseline, final, max_diff_bytes=BIG)
    check_applies(baseline, patch)
    check_applies(baseline, b"")

    wrong_context = patch.replace(b" hello\n", b" goodbye\n")
    with pytest.raises(HarnessError, match="does not apply") as err:
        check_applies(baseline, wrong_context)
    assert "README.md" in err.value.problem
    with pytest.raises(HarnessError, match="does not apply"):
        check_applies(baseline, b"diff --git a/x b/x\ngarbage\n@@ nonsense\n")
    # check_applies never touches the baseline
    assert (baseline / "README.md").read_text() == "hello\n"
