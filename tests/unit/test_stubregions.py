"""gateway/local/stubregions.py over a stand-in /dev/shm and /proc: only the python backend's regions no
process maps are unlinked, and the list kept in Triton's work dir follows what is left."""

from __future__ import annotations

from pathlib import Path

from gateway.local import stubregions

A, B, C = (stubregions.PREFIX + x for x in ("aaaa", "bbbb", "cccc"))


def _world(tmp_path: Path, regions: list[str], maps: dict[str, list[str]]) -> tuple[Path, Path]:
    shm, proc = tmp_path / "shm", tmp_path / "proc"
    shm.mkdir()
    proc.mkdir()
    for name in [*regions, "triton-gateway-host-1-ab", "other"]:
        (shm / name).write_bytes(b"\0" * 16)
    for pid, names in maps.items():
        (proc / pid).mkdir()
        lines = [f"7f00-7f10 rw-s 00000000 00:1a 12 {shm}/{n}" for n in names]
        lines.append("7f10-7f20 r-xp 00000000 08:01 34 /usr/lib/libc.so.6")
        (proc / pid / "maps").write_text("\n".join(lines) + "\n")
    (proc / "self-not-a-pid").mkdir()
    return shm, proc


def test_only_unmapped_backend_regions_are_unlinked(tmp_path):
    shm, proc = _world(tmp_path, [A, B, C], {"101": [A], "202": [f"{C} (deleted)"]})
    assert stubregions.present(shm) == {A, B, C}
    assert stubregions.mapped(proc, shm) == {A, C}
    gone = stubregions.release([A, B, C, "triton-gateway-host-1-ab", "other", "../etc"], shm, proc)
    assert gone == [B]
    assert sorted(p.name for p in shm.iterdir()) == sorted([A, C, "triton-gateway-host-1-ab", "other"])


def test_the_kept_list_is_released_at_the_next_start_and_then_dropped(tmp_path):
    shm, proc = _world(tmp_path, [A, B], {"101": [A]})
    work = tmp_path / "work"
    work.mkdir()
    stubregions.remember(work, [A, B])  # a run killed before it could give them back
    assert stubregions.remembered(work) == {A, B}
    assert stubregions.forget(work, (), shm, proc) == [B]
    assert stubregions.remembered(work) == {A}  # still mapped: kept on the list
    (proc / "101" / "maps").write_text("")  # its last user is gone
    assert stubregions.forget(work, (), shm, proc) == [A]
    assert not (work / stubregions.LIST_NAME).exists() and stubregions.present(shm) == set()


def test_missing_directories_are_nothing_to_do(tmp_path):
    assert stubregions.present(tmp_path / "none") == set()
    assert stubregions.mapped(tmp_path / "none", tmp_path) == set()
    assert stubregions.release([A], tmp_path / "none", tmp_path / "none") == []  # nothing there to unlink
    assert stubregions.remembered(tmp_path / "none") == set()
