"""The saved-state tiers' storage (worker/engine/tiers/): files that are refused and deleted, byte
limits under churn, the longest prefix found by block walk. Payloads here are plain bytes: the
store never reads them, llama.cpp does (tests/e2e/test_state_tiers.py restores real ones)."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from worker.engine.tiers import TieredStore, TierSettings
from worker.engine.tiers.disk import SUFFIX, DiskTier
from worker.engine.tiers.identity import Identity, model_identity
from worker.engine.tiers.stateformat import MAGIC

BLOCK = 16


@pytest.fixture
def identity(tmp_path: Path) -> Identity:
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF" + bytes(range(256)) * 64)
    return model_identity(model, build="test-build 1", layout="flash_attn=0")


def store(identity: Identity, folder: Path, host: int = 1 << 20, disk: int = 1 << 20) -> TieredStore:
    return TieredStore(identity, TierSettings(host, disk, folder, BLOCK))


def tokens(n: int, seed: int = 0) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(50_000) for _ in range(n)]


def payload(n: int, fill: int = 7) -> bytearray:
    return bytearray([fill]) * n


def test_the_longest_saved_prefix_is_found_to_the_token(identity, tmp_path):
    s = store(identity, tmp_path / "kv")
    a = tokens(100, seed=1)
    s.save(a, payload(1000))
    s.flush()
    prompt = a[:70] + tokens(40, seed=2)
    found, shared = s.best(prompt)
    assert shared == 70 and found.tokens == a and found.tier == "host"
    assert s.best(tokens(100, seed=3)) is None  # no block in common
    assert s.covers(a[:90]) and not s.covers(a + [1] * BLOCK)
    s.close()


def test_a_newer_round_of_the_same_conversation_replaces_the_older_state(identity, tmp_path):
    s = store(identity, tmp_path / "kv")
    a = tokens(64, seed=1)
    s.save(a, payload(500))
    s.save(a + tokens(40, seed=5), payload(600))
    s.flush()
    assert len(s.host) == 1 and len(s.disk) == 1 and s.host.bytes == 600
    assert len(list((tmp_path / "kv").glob(f"*{SUFFIX}"))) == 1
    s.close()


def folder_bytes(folder: Path) -> int:
    """Bytes of state files now (a file the writer deletes meanwhile counts nothing)."""
    total = 0
    for p in folder.glob(f"*{SUFFIX}"):
        try:
            total += p.stat().st_size
        except FileNotFoundError:
            pass
    return total


def test_byte_limits_hold_under_churn(identity, tmp_path):
    folder = tmp_path / "kv"
    s = store(identity, folder, host=5_000, disk=12_000)
    for i in range(60):
        s.save(tokens(BLOCK * 2 + i % 7, seed=100 + i), payload(900 + 37 * (i % 5), fill=i))
        if i % 5 == 0:
            s.flush()
        assert s.host.bytes <= 5_000
        assert folder_bytes(folder) <= 12_000
    s.flush()
    on_disk = folder_bytes(folder)
    assert 0 < on_disk <= 12_000 and on_disk == s.disk.bytes
    assert 0 < s.host.bytes <= 5_000
    # the most recent states are the ones kept
    last = tokens(BLOCK * 2 + 59 % 7, seed=159)
    assert s.best(last)[1] == len(last)
    assert s.best(tokens(BLOCK * 2, seed=100)) is None
    s.close()


def test_a_state_larger_than_a_tier_is_not_held_there(identity, tmp_path):
    s = store(identity, tmp_path / "kv", host=100, disk=100_000)
    a = tokens(40)
    s.save(a, payload(5_000))
    s.flush()
    assert len(s.host) == 0 and len(s.disk) == 1
    found, _ = s.best(a)
    assert found.tier == "disk"
    assert s.fetch(found.key).result(10) == payload(5_000)  # read back, and still too big for memory
    assert len(s.host) == 0
    s.close()


def _saved_file(identity: Identity, folder: Path) -> tuple[Path, list[int]]:
    s = store(identity, folder)
    a = tokens(48, seed=9)
    s.save(a, payload(4_000, fill=3))
    s.close()
    [path] = folder.glob(f"*{SUFFIX}")
    return path, a


def _reopen(identity: Identity, folder: Path) -> TieredStore:
    return store(identity, folder)


def test_a_restart_finds_the_states_on_disk(identity, tmp_path):
    folder = tmp_path / "kv"
    _, a = _saved_file(identity, folder)
    s = _reopen(identity, folder)
    found, shared = s.best(a)
    assert found.tier == "disk" and shared == len(a)
    assert s.fetch(found.key).result(10) == payload(4_000, fill=3)
    assert s.best(a)[0].tier == "host"  # read once, then held in memory
    s.close()


@pytest.mark.parametrize(
    "damage",
    ["truncated", "appended", "flipped", "magic", "header_only", "empty"],
)
def test_a_damaged_file_is_refused_and_deleted(identity, tmp_path, damage):
    folder = tmp_path / "kv"
    path, a = _saved_file(identity, folder)
    data = bytearray(path.read_bytes())
    if damage == "truncated":
        data = data[:-100]
    elif damage == "appended":
        data += b"x"
    elif damage == "flipped":  # the payload's last byte: only the checksum can tell
        data[-1] ^= 0xFF
    elif damage == "magic":
        data[:8] = b"NOTTOOLQ"
    elif damage == "header_only":
        data = data[:20]
    else:
        data = bytearray()
    path.write_bytes(bytes(data))
    s = _reopen(identity, folder)
    found = s.best(a)
    if found is not None:  # the header passed: the checksum fails when the payload is read
        assert damage == "flipped"
        assert s.fetch(found[0].key).result(10) is None
        assert s.best(a) is None
    assert not path.exists()
    assert s.stats.refused_files == 1
    s.close()


@pytest.mark.parametrize("other", ["model", "build", "layout"])
def test_a_file_from_another_model_or_build_is_refused_and_deleted(identity, tmp_path, other):
    folder = tmp_path / "kv"
    path, a = _saved_file(identity, folder)
    model = tmp_path / "model.gguf"
    if other == "model":
        model.write_bytes(b"GGUF" + bytes(range(255, -1, -1)) * 64)
    foreign = model_identity(
        model,
        build="test-build 2" if other == "build" else "test-build 1",
        layout="flash_attn=1" if other == "layout" else "flash_attn=0",
    )
    assert foreign.digest != identity.digest
    s = store(foreign, folder)
    assert s.best(a) is None and not path.exists() and s.stats.refused_files == 1
    s.close()


def test_half_written_files_and_strangers_are_handled_at_start(identity, tmp_path):
    folder = tmp_path / "kv"
    folder.mkdir()
    (folder / f"abc{SUFFIX}.tmp").write_bytes(MAGIC + b"partial")
    (folder / "notes.txt").write_text("not ours")
    s = store(identity, folder)
    assert not (folder / f"abc{SUFFIX}.tmp").exists()
    assert (folder / "notes.txt").exists()  # a file that is not a state file is left alone
    s.close()


def test_one_folder_serves_one_worker(identity, tmp_path):
    folder = tmp_path / "kv"
    s = store(identity, folder)
    with pytest.raises(OSError, match="in use by another worker"):
        store(identity, folder)
    s.close()
    store(identity, folder).close()  # free again once the first one closed


def test_the_disk_tier_alone_checks_the_whole_file_on_read(identity, tmp_path):
    folder = tmp_path / "kv"
    path, _ = _saved_file(identity, folder)
    disk = DiskTier(folder, 1 << 20, identity)
    [key] = disk.scan()
    with open(path, "r+b") as f:  # damaged after the scan, before the read
        f.seek(os.path.getsize(path) - 10)
        f.write(b"\x00" * 10)
    assert disk.read(key) is None and not path.exists() and disk.bytes == 0
    disk.release()


def test_a_ready_buffer_is_handed_out_once_then_made_again(identity, tmp_path):
    """The buffer a save copies into (spare.py) is made when asked (the engine asks when idle)."""
    s = TieredStore(identity, TierSettings(1 << 20, 0, None, BLOCK), spare_bytes=10_000)
    assert s.ready_buffer(6_000) is None  # none made yet: a save allocates its own
    assert s.make_ready() and not s.make_ready()  # made once; a second call has nothing to do
    assert s.ready_buffer(20_000) is None  # a state larger than the buffer gets a fresh one
    buf = s.ready_buffer(6_000)
    assert buf is not None and len(buf) == 10_000
    assert s.ready_buffer(6_000) is None
    assert s.make_ready()
    again = s.ready_buffer(6_000)
    assert again is not None and again is not buf
    s.close()


def test_a_trimmed_buffer_counts_its_allocation_in_host_memory():
    """A state trimmed in a larger buffer holds the buffer's memory: the byte limit counts that."""
    from worker.engine.tiers.host import HostTier, held_bytes

    buf = bytearray(10_000)
    del buf[6_000:]  # more than half of it: CPython keeps the allocation
    assert len(buf) == 6_000 and held_bytes(buf) == 10_000
    host = HostTier(9_000)
    assert host.put("k", buf) == ["k"] and host.bytes == 0
    host = HostTier(20_000)
    assert host.put("k", buf) == [] and host.bytes == 10_000
    host.drop("k")
    assert host.bytes == 0
