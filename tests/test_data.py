"""Data: corpora (no network), shifted windows, batches, the split, and the digit task."""

import hashlib

import pytest
import torch

from fundamentallm import data
from fundamentallm.data import (
    DIGIT_VOCAB,
    DataSource,
    TextDataset,
    decode_digits,
    digit_operations,
    encode_digits,
    get_batch,
    load_corpus,
    train_val_split,
)


def test_python_docs_corpus_is_builtin():
    from pydoc_data.topics import topics

    text = load_corpus("python-docs")
    assert text == "\n".join(topics[k] for k in sorted(topics))
    assert len(text) > 100_000


def test_load_corpus_from_path(tmp_path):
    (tmp_path / "c.txt").write_text("héllo\n", encoding="utf-8")
    assert load_corpus(tmp_path / "c.txt") == "héllo\n"
    assert load_corpus(str(tmp_path / "c.txt")) == "héllo\n"


def test_unknown_corpus_lists_names():
    with pytest.raises(ValueError, match="known corpora: 'python-docs', 'tinyshakespeare'"):
        load_corpus("no-such-corpus")


@pytest.fixture
def fake_download(tmp_path, monkeypatch):
    """A cache in tmp_path and a downloader that never touches the network."""
    content = b"First Citizen:\nBefore we proceed any further, hear me speak.\n"
    monkeypatch.setenv("FUNDAMENTALLM_CACHE", str(tmp_path / "cache"))
    url, _ = data.DOWNLOADS["tinyshakespeare"]
    monkeypatch.setitem(data.DOWNLOADS, "tinyshakespeare", (url, hashlib.sha256(content).hexdigest()))
    calls = []

    def downloader(u, dest):
        calls.append(u)
        dest.write_bytes(content)

    monkeypatch.setattr(data, "_download", downloader)
    return content, calls


def test_download_is_cached_and_verified(fake_download, tmp_path):
    content, calls = fake_download
    assert load_corpus("tinyshakespeare") == content.decode()
    assert load_corpus("tinyshakespeare") == content.decode()
    assert len(calls) == 1  # the second call reads the cache
    assert (tmp_path / "cache" / "tinyshakespeare.txt").read_bytes() == content


def test_preplaced_cache_file_needs_no_download(fake_download, tmp_path):
    content, calls = fake_download
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "tinyshakespeare.txt").write_bytes(content)
    assert load_corpus("tinyshakespeare") == content.decode()
    assert calls == []


def test_checksum_mismatch_is_reported(fake_download, tmp_path):
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "tinyshakespeare.txt").write_bytes(b"tampered")
    with pytest.raises(ValueError, match="checksum mismatch"):
        load_corpus("tinyshakespeare")


def test_offline_error_says_how_to_pass_a_path(monkeypatch, tmp_path):
    monkeypatch.setenv("FUNDAMENTALLM_CACHE", str(tmp_path))

    def offline(url, dest):
        raise OSError("network is unreachable")

    monkeypatch.setattr(data, "_download", offline)
    with pytest.raises(RuntimeError, match=r"load_corpus\('/path/to/tinyshakespeare.txt'\)"):
        load_corpus("tinyshakespeare")
    assert not any(tmp_path.iterdir())  # no partial file left behind


def test_text_dataset_windows_are_shifted():
    ids = torch.arange(10)
    ds = TextDataset(ids, block_size=4)
    assert len(ds) == 6
    x, y = ds[0]
    assert x.tolist() == [0, 1, 2, 3] and y.tolist() == [1, 2, 3, 4]
    assert ds[-1][1].tolist() == [6, 7, 8, 9]
    eval_ds = TextDataset(list(range(10)), block_size=4, stride=4)
    assert [x.tolist() for x, _ in eval_ds] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    with pytest.raises(IndexError):
        ds[6]
    with pytest.raises(ValueError, match="block_size=0"):
        TextDataset(ids, 0)
    with pytest.raises(ValueError, match="too few"):
        TextDataset(ids, 10)


def test_train_val_split_takes_the_last_fraction():
    train, val = train_val_split(list(range(100)), 0.1)
    assert train == list(range(90)) and val == list(range(90, 100))
    t_train, t_val = train_val_split(torch.arange(100), 0.25)
    assert len(t_train) == 75 and t_val[0].item() == 75
    with pytest.raises(ValueError, match="val_fraction=1.5"):
        train_val_split([1, 2], 1.5)


def test_get_batch_is_seeded_and_shifted():
    ids = torch.arange(1000)
    x1, y1 = get_batch(ids, 8, 16, torch.Generator().manual_seed(3))
    x2, _ = get_batch(ids, 8, 16, torch.Generator().manual_seed(3))
    assert x1.shape == y1.shape == (8, 16)
    assert torch.equal(x1, x2)
    assert torch.equal(y1, x1 + 1)  # arange: the target is the next id


def test_digit_vocabulary_has_20_tokens():
    assert len(DIGIT_VOCAB) == 20 and len(set(DIGIT_VOCAB)) == 20
    assert decode_digits(encode_digits("Max ( 3 5 1 )")) == "Max ( 3 5 1 )"
    with pytest.raises(ValueError, match="unknown token"):
        encode_digits("Sum ( 1 2 )")


def test_digit_operations_answers_and_framings():
    task = digit_operations(300, 50, 50, min_len=2, max_len=5, seed=1)
    assert (len(task.train), len(task.val), len(task.test)) == (300, 50, 50)
    split = task.train
    for i in range(50):
        op, d = split.operations[i], split.digits[i]
        want = {"First": d[0], "Second": d[1], "Last": d[-1], "Max": max(d), "Min": min(d)}[op]
        assert split.labels[i].item() == want
        assert decode_digits(split.input_ids[i]) == f"<cls> {op} ( {' '.join(map(str, d))} )"
        assert split.attention_mask[i].sum().item() == len(d) + 4
        assert decode_digits(split.lm_input_ids[i]) == f"{op} ( {' '.join(map(str, d))} ) {want}"
        scored = (split.lm_targets[i] != -100).nonzero().flatten().tolist()
        assert scored == [len(d) + 2]  # only the position of ")" is scored
        assert split.lm_targets[i, scored[0]].item() == split.lm_input_ids[i, scored[0] + 1].item()
    x, y, mask = split.classification()[0]
    assert x.shape == mask.shape == (9,) and y.dim() == 0


def test_digit_operations_is_seeded_and_splits_are_disjoint():
    a, b = digit_operations(200, 50, 50, seed=7), digit_operations(200, 50, 50, seed=7)
    assert torch.equal(a.train.input_ids, b.train.input_ids)
    assert not torch.equal(a.train.input_ids, digit_operations(200, 50, 50, seed=8).train.input_ids)
    keys = [set(zip(s.operations, map(tuple, s.digits))) for s in (a.train, a.val, a.test)]
    assert sum(map(len, keys)) == 300 and len(set.union(*keys)) == 300


def test_digit_operations_errors():
    with pytest.raises(ValueError, match="min_len=1"):
        digit_operations(min_len=1)
    with pytest.raises(ValueError, match="operations="):
        digit_operations(operations=["Sum"])
    with pytest.raises(ValueError, match="distinct examples"):
        digit_operations(1000, 0, 0, min_len=2, max_len=2)


def test_data_source_formats_agree():
    ids = torch.arange(50)
    stream = DataSource(ids, block_size=8)
    windows = DataSource(TextDataset(ids, 8, stride=8), block_size=None)
    for (x1, y1), (x2, y2) in zip(stream.batches(4), windows.batches(4)):
        assert torch.equal(x1, x2) and torch.equal(y1, y2)
    assert sum(len(x) for x, _ in stream.batches(4)) == 6  # (50 - 1) // 8 full windows
    pairs = DataSource((torch.arange(10), torch.arange(10) * 2), block_size=None)
    x, y = pairs.sample(5, torch.Generator().manual_seed(0))
    assert torch.equal(y, 2 * x)
    with pytest.raises(ValueError, match="needs a block_size"):
        DataSource(ids, block_size=None)


# --- Bad inputs (issue 15; tests/README.md lists every probe) --------------------------------------

def test_bad_corpus_files_name_the_file(tmp_path):
    (tmp_path / "latin1.txt").write_bytes("caf\xe9 cr\xe8me".encode("latin-1"))
    with pytest.raises(ValueError, match="latin1.txt' is not UTF-8 text"):
        load_corpus(tmp_path / "latin1.txt")
    (tmp_path / "blob.bin").write_bytes(b"\x00\x01\x02abc")
    with pytest.raises(ValueError, match="blob.bin' contains NUL bytes"):
        load_corpus(str(tmp_path / "blob.bin"))
    (tmp_path / "empty.txt").write_text("")
    with pytest.raises(ValueError, match="empty.txt' is empty"):
        load_corpus(tmp_path / "empty.txt")
    with pytest.raises(ValueError, match="is a directory"):
        load_corpus(tmp_path)
    with pytest.raises(TypeError, match="name_or_path"):
        load_corpus(3)


@pytest.mark.parametrize("fraction,side", [(0.999, "training"), (1e-20, "validation")])
def test_split_that_leaves_an_empty_side_is_refused(fraction, side):
    with pytest.raises(ValueError, match=f"val_fraction={fraction}.*empty {side} split"):
        train_val_split(list(range(100)), fraction)


@pytest.mark.parametrize("kwargs,name", [(dict(batch_size=0, block_size=4), "batch_size=0"),
                                         (dict(batch_size=2, block_size=-1), "block_size=-1"),
                                         (dict(batch_size=2.0, block_size=4), "batch_size=2.0")])
def test_get_batch_rejects_bad_sizes(kwargs, name):
    with pytest.raises(ValueError, match=name):
        get_batch(torch.arange(50), **kwargs)


# --- Token files and memory maps (issue 28) --------------------------------------------------------

def test_get_batch_slices_tensors_and_memmaps_alike(tmp_path):
    np = pytest.importorskip("numpy")
    ids = np.random.default_rng(0).integers(0, 60_000, 5000).astype(np.uint16)
    ids.tofile(tmp_path / "ids.bin")
    mm = np.memmap(tmp_path / "ids.bin", dtype=np.uint16, mode="r")
    outs = [get_batch(d, 6, 32, generator=torch.Generator().manual_seed(1))
            for d in (mm, torch.from_numpy(ids.astype(np.int64)), ids.astype(np.int32).tolist())]
    for x, y in outs:
        assert x.dtype == torch.int64 and x.shape == (6, 32)
        assert torch.equal(x, outs[0][0]) and torch.equal(y, outs[0][1])
        assert torch.equal(x[:, 1:], y[:, :-1])
    # the windows are the memmap's tokens at the drawn starts
    starts = torch.randint(5000 - 32, (6,), generator=torch.Generator().manual_seed(1))
    assert outs[0][0][0].tolist() == ids[starts[0]:starts[0] + 32].tolist()
    # device=, and a generator passed positionally (the signature before device existed)
    x, _ = get_batch(mm, 6, 32, "cpu", generator=torch.Generator().manual_seed(1))
    x2, _ = get_batch(mm, 6, 32, torch.Generator().manual_seed(1))
    assert x.device.type == "cpu" and torch.equal(x, outs[0][0]) and torch.equal(x2, x)


def test_data_source_keeps_a_memmap_unconverted(tmp_path):
    np = pytest.importorskip("numpy")
    np.arange(200, dtype=np.uint16).tofile(tmp_path / "a.bin")
    mm = np.memmap(tmp_path / "a.bin", dtype=np.uint16, mode="r")
    source = DataSource(mm, block_size=8)
    assert source.stream is mm  # no copy, no int64 conversion of the corpus
    tensor = DataSource(torch.arange(200), block_size=8)
    for (x1, y1), (x2, y2) in zip(source.batches(5), tensor.batches(5)):
        assert torch.equal(x1, x2) and torch.equal(y1, y2)


@pytest.mark.parametrize("kind", ["char", "bpe", "file"])
def test_prepare_writes_bins_that_load_prepared_maps(tmp_path, kind):
    from fundamentallm.tokenizers import ByteBPETokenizer

    text = load_corpus("python-docs")[:30_000] + "<|endoftext|>" + "end"
    (tmp_path / "c.txt").write_text(text, encoding="utf-8")
    if kind == "file":
        ByteBPETokenizer.from_text(text, 300).save(tmp_path / "tok.json")
    tok = data.tokenizer_for_text(tmp_path / "c.txt", str(tmp_path / "tok.json") if kind == "file" else kind, 300)
    meta = data.prepare(tmp_path / "c.txt", tok, tmp_path / "d", val_fraction=0.2)
    tok2, train, val, meta2 = data.load_prepared(tmp_path / "d")
    assert meta2 == meta and meta["dtype"] == "uint16" and tok2.to_dict() == tok.to_dict()
    assert train.dtype == val.dtype == "uint16" and isinstance(train, __import__("numpy").memmap)
    all_ids = tok.encode(text)
    assert train.tolist() + val.tolist() == all_ids
    assert len(val) == len(all_ids) - int(len(all_ids) * 0.8)
    assert not (tmp_path / "d" / "all.bin.tmp").exists()


def test_cli_prepare_then_train_from_the_memory_map(tmp_path, monkeypatch):
    from fundamentallm.__main__ import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "c.txt").write_text(load_corpus("python-docs")[:20_000], encoding="utf-8")
    assert main(["prepare", "c.txt", "--tokenizer", "bpe", "--vocab-size", "300", "--out", "d"]) == 0
    assert main(["train", "--data", "d", "--preset", "nano", "--steps", "2", "--batch-size", "2",
                 "--block-size", "16", "--no-progress", "--out", "run"]) == 0
    from fundamentallm.checkpoint import load_checkpoint

    ckpt = load_checkpoint(tmp_path / "run")
    assert ckpt.config.vocab_size == 300 and ckpt.extra["data"] == "d"


def test_get_batch_on_a_memmap_keeps_rss_flat(tmp_path):
    """Pages a mapping has read stay in RSS until unmapped; get_batch reads through a fresh
    mapping, so 40 random batches from a 64 MB token file leave the caller's RSS where it was
    (before, each random window added up to a 2 MB folio of file pages on Linux 6.x)."""
    np = pytest.importorskip("numpy")
    status = __import__("pathlib").Path("/proc/self/status")
    if not status.exists():
        pytest.skip("needs /proc (Linux)")

    def rss_file_kb():
        line = next(s for s in status.read_text().splitlines() if s.startswith("RssFile:"))
        return int(line.split()[1])

    np.random.default_rng(0).integers(0, 100, 32_000_000, dtype=np.uint16).tofile(tmp_path / "t.bin")
    mm = np.memmap(tmp_path / "t.bin", dtype=np.uint16, mode="r")
    before = rss_file_kb()
    g = torch.Generator().manual_seed(0)
    for _ in range(40):
        get_batch(mm, 16, 64, generator=g)
    assert rss_file_kb() - before < 8_000  # KB; 640 windows over 64 MB would map far more
