"""Chapter 8's wrong-answer table: the answers each check of :mod:`fundamentallm.checks.ch08`
must reject, run live by ``python -m fundamentallm.course catches --chapter 08`` and by
``tests/test_catches.py`` (see :mod:`fundamentallm.checks.wrong`)."""

from ..wrong import wrong_answer

wrong_answer("check_char_encode", "mistake", "drops unknown characters instead of mapping them to unk_id", """
def char_encode(text, stoi, unk_id):
    return [stoi[c] for c in text if c in stoi]
""", call="char_encode", message=r"expected \d+ ids, got \d+")

wrong_answer("check_char_encode", "mistake", "a fixed unknown id (1) instead of the unk_id given", """
def char_encode(text, stoi, unk_id):
    return [stoi.get(c, 1) for c in text]
""", call="char_encode", message=r"unk_id=99")

wrong_answer("check_char_encode", "edge", "adds unseen characters to the vocabulary while encoding", """
def char_encode(text, stoi, unk_id):
    return [stoi.setdefault(c, len(stoi)) for c in text]
""", call="char_encode", message=r"you changed stoi")

wrong_answer("check_bpe_prediction", "mistake", "breaks ties by the smallest pair of ids (the rule the old solution taught)", """
predicted_merges = [".x", "ab", ".xy", "ab.xy"]
""", call="predicted_merges, {'first': 'y.', 'merges': 44}", message=r"tie rule 'smallest ids'.*reread")

wrong_answer("check_bpe_prediction", "mistake", "breaks ties by the pair seen first (minbpe's rule)", """
predicted_merges = ["ab", "ab.", "ab.x", "ab.xy"]
""", call="predicted_merges, {'first': 'y.', 'merges': 44}", message=r"tie rule 'first seen'")

wrong_answer("check_bpe_prediction", "mistake", "the greatest bytes, but pairs not recounted after a merge", """
predicted_merges = ["xy", "b.", "ab", ".x"]
""", call="predicted_merges, {'first': 'y.', 'merges': 44}", message=r"not the merges training makes")

wrong_answer("check_bpe_prediction", "edge", "keeps merging pairs that occur once", """
predicted_merges = ["xy", "b.", "b.xy", "ab.xy", "ab.xy."]
""", call="predicted_merges, {'first': 'y.', 'merges': 44}", message=r"different number of merges")

wrong_answer("check_bpe_prediction", "value", "the final tokens of the text, not the merges", """
predicted_merges = "ab.xy . ab.xy"
""", call="predicted_merges, {'first': 'y.', 'merges': 44}", message=r"must be a list of strings")

_CH08_ENCODE_CHUNK = '''
def _encode_ids(ids, merges):
    while len(ids) >= 2:
        pair = min(zip(ids, ids[1:]), key=lambda p: merges.get(p, float("inf")))
        if pair not in merges:
            break
        out, i = [], 0
        while i < len(ids):
            if i + 1 < len(ids) and (ids[i], ids[i + 1]) == pair:
                out.append(merges[pair]); i += 2
            else:
                out.append(ids[i]); i += 1
        ids = out
    return ids
'''

wrong_answer("check_chunked_bpe_encode", "mistake", "encodes the whole text at once (merges cross chunk boundaries)",
             _CH08_ENCODE_CHUNK + """
def chunked_bpe_encode(text, merges, pattern):
    return _encode_ids(list(text.encode("utf-8")), merges)
""", call="chunked_bpe_encode", message=r"encoded the whole text at once")

wrong_answer("check_chunked_bpe_encode", "mistake", "applies the latest-learned merge present first", """
import re
def chunked_bpe_encode(text, merges, pattern):
    out = []
    for chunk in re.findall(pattern, text):
        ids = list(chunk.encode("utf-8"))
        while present := [p for p in zip(ids, ids[1:]) if p in merges]:
            pair, merged, i = max(present, key=merges.get), [], 0
            while i < len(ids):
                if i + 1 < len(ids) and (ids[i], ids[i + 1]) == pair:
                    merged, i = merged + [merges[pair]], i + 2
                else:
                    merged, i = merged + [ids[i]], i + 1
            ids = merged
        out += ids
    return out
""", call="chunked_bpe_encode", message=r"first mismatch at position")

wrong_answer("check_chunked_bpe_encode", "edge", "encodes characters, not UTF-8 bytes (wrong on non-ASCII text)",
             _CH08_ENCODE_CHUNK + """
import re
def chunked_bpe_encode(text, merges, pattern):
    return [i for chunk in re.findall(pattern, text) for i in _encode_ids([ord(c) for c in chunk], merges)]
""", call="chunked_bpe_encode", message=r"text with unicode.*outside ASCII")

wrong_answer("check_chunked_bpe_encode", "mistake", "the statement's buggy encoder unchanged (code points, latest merge first)", """
import re
def chunked_bpe_encode(text, merges, pattern):
    out = []
    for chunk in re.findall(pattern, text):
        ids = [ord(c) for c in chunk]
        while len(ids) >= 2:
            present = [p for p in zip(ids, ids[1:]) if p in merges]
            if not present:
                break
            pair = max(present, key=merges.get)
            merged, i = [], 0
            while i < len(ids):
                if i + 1 < len(ids) and (ids[i], ids[i + 1]) == pair:
                    merged.append(merges[pair]); i += 2
                else:
                    merged.append(ids[i]); i += 1
            ids = merged
        out.extend(ids)
    return out
""", call="chunked_bpe_encode", message=r"outside ASCII")

wrong_answer("check_chunked_bpe_encode", "method", "the package's ByteBPETokenizer, which the exercise forbids", """
from fundamentallm.tokenizers import ByteBPETokenizer as Tok
def chunked_bpe_encode(text, merges, pattern):
    return Tok(list(merges), pattern=pattern).encode(text)
""", call="chunked_bpe_encode", message=r"not to use fundamentallm.tokenizers")

wrong_answer("check_chunked_bpe_encode", "method", "the chapter's bpe_encode (another cell) on each chunk", """
exec(compile('''
def bpe_encode(text, merges):
    rank = lambda p: merges.get(p, float("inf"))
    ids = list(text.encode("utf-8"))
    while len(ids) >= 2:
        pair = min(zip(ids, ids[1:]), key=rank)
        if pair not in merges:
            break
        out, i = [], 0
        while i < len(ids):
            if i + 1 < len(ids) and (ids[i], ids[i + 1]) == pair:
                out.append(merges[pair]); i += 2
            else:
                out.append(ids[i]); i += 1
        ids = out
    return ids
''', "<the chapter's bpe_encode cell>", "exec"), globals())
import re
def chunked_bpe_encode(text, merges, pattern):
    return [i for chunk in re.findall(pattern, text) for i in bpe_encode(chunk, merges)]
""", call="chunked_bpe_encode", message=r"self-contained")

wrong_answer("check_make_windows", "mistake", "ignores the stride (every start)", """
def make_windows(ids, block_size, stride):
    n = len(ids) - block_size
    pos = torch.arange(n)[:, None] + torch.arange(block_size)[None, :]
    return ids[pos], ids[pos + 1]
""", call="make_windows", message=r"too many")

wrong_answer("check_make_windows", "edge", "one window short when the last window ends on the last id", """
def make_windows(ids, block_size, stride):
    n = (len(ids) - block_size - 1) // stride
    pos = (torch.arange(n) * stride)[:, None] + torch.arange(block_size)[None, :]
    return ids[pos], ids[pos + 1]
""", call="make_windows", message=r"too few")

wrong_answer("check_make_windows", "mistake", "y is x (no shift)", """
def make_windows(ids, block_size, stride):
    n = (len(ids) - block_size - 1) // stride + 1
    pos = (torch.arange(n) * stride)[:, None] + torch.arange(block_size)[None, :]
    return ids[pos], ids[pos]
""", call="make_windows", message=r"y for .*shifted")

wrong_answer("check_make_windows", "method", "Tensor.unfold with the stride as its step (the chapter's built-in)", """
def make_windows(ids, block_size, stride):
    runs = ids.unfold(0, block_size + 1, stride)
    return runs[:, :-1], runs[:, 1:]
""", call="make_windows", message=r"not to use torch.Tensor.unfold")

wrong_answer("check_make_windows", "value", "returns x alone", """
def make_windows(ids, block_size, stride):
    n = (len(ids) - block_size - 1) // stride + 1
    pos = (torch.arange(n) * stride)[:, None] + torch.arange(block_size)[None, :]
    return ids[pos]
""", call="make_windows", message=r"return a pair \(x, y\)")

_CH08_RIGHT_COUNTS = '''
def target_counts(n, block_size, stride=1):
    counts = torch.zeros(n, dtype=torch.long)
    for s in range(0, n - block_size, stride):
        counts[s + 1:s + block_size + 1] += 1
    return counts
'''

wrong_answer("check_target_counts", "mistake", "predicts where each token is an input, not a target", _CH08_RIGHT_COUNTS + '''
predicted_counts = [1, 1, 2, 1, 2, 1, 2, 1, 1, 0]
''', call="target_counts, predicted_counts", message=r"counted where each token is an input")

wrong_answer("check_target_counts", "mistake", "predicts the stride-1 counts (ignores the stride)", _CH08_RIGHT_COUNTS + '''
predicted_counts = [0, 1, 2, 3, 3, 3, 3, 3, 2, 1]
''', call="target_counts, predicted_counts", message=r"counts of stride 1")

wrong_answer("check_target_counts", "mistake", "predicts one count per token (forgets the ends and the overlaps)",
             _CH08_RIGHT_COUNTS + '''
predicted_counts = [1] * 10
''', call="target_counts, predicted_counts", message=r"both ends")

wrong_answer("check_target_counts", "edge", "right prediction, but the function counts inputs (off by one)", '''
def target_counts(n, block_size, stride):
    counts = torch.zeros(n, dtype=torch.long)
    for s in range(0, n - block_size, stride):
        counts[s:s + block_size] += 1
    return counts
predicted_counts = [0, 1, 1, 2, 1, 2, 1, 2, 1, 1]
''', call="target_counts, predicted_counts", message=r"target_counts\(10, 3, 1\)")

wrong_answer("check_target_counts", "edge", "keeps one window too many: a last window that runs past the stream",
             '''
def target_counts(n, block_size, stride):
    counts = torch.zeros(n, dtype=torch.long)
    for s in range(0, n - block_size + 1, stride):
        counts[s + 1:s + block_size + 1] += 1
    return counts
predicted_counts = [0, 1, 1, 2, 1, 2, 1, 2, 1, 1]
''', call="target_counts, predicted_counts", message=r"which windows exist")

wrong_answer("check_target_counts", "mistake", "ignores the stride in the function", '''
def target_counts(n, block_size, stride):
    counts = torch.zeros(n, dtype=torch.long)
    for s in range(n - block_size):
        counts[s + 1:s + block_size + 1] += 1
    return counts
predicted_counts = [0, 1, 1, 2, 1, 2, 1, 2, 1, 1]
''', call="target_counts, predicted_counts", message=r"counts of stride 1")

wrong_answer("check_char_encode", "mistake", "lowercases the text before looking characters up", """
def char_encode(text, stoi, unk_id):
    return [stoi.get(c, unk_id) for c in text.lower()]
""", call="char_encode", message=r"first mismatch at position")

wrong_answer("check_make_windows", "method", "Tensor.as_strided, the same view under another name", """
def make_windows(ids, block_size, stride):
    n = (len(ids) - block_size - 1) // stride + 1
    runs = ids.as_strided((n, block_size + 1), (stride, 1))
    return runs[:, :-1], runs[:, 1:]
""", call="make_windows", message=r"not to use torch(\.Tensor)?\.as_strided")

wrong_answer("check_make_windows", "method", "numpy's sliding_window_view", """
def make_windows(ids, block_size, stride):
    runs = torch.as_tensor(np.lib.stride_tricks.sliding_window_view(ids.numpy(), block_size + 1)[::stride].copy())
    return runs[:, :-1], runs[:, 1:]
""", call="make_windows", message=r"not to use numpy.lib.stride_tricks.sliding_window_view")

wrong_answer("check_make_windows", "method", "the package's TextDataset, one window per item", """
from fundamentallm.data import TextDataset
def make_windows(ids, block_size, stride):
    ds = TextDataset(ids, block_size, stride=stride)
    pairs = [ds[i] for i in range(len(ds))]
    return torch.stack([p[0] for p in pairs]), torch.stack([p[1] for p in pairs])
""", call="make_windows", message=r"not to use fundamentallm.data.TextDataset")

_BPE_RIGHT = 'predicted_merges = ["xy", "b.", "b.xy", "ab.xy"]\n'

wrong_answer("check_bpe_prediction", "mistake", "the long text's first merge copied from 'ab.xy.ab.xy' (xy)",
             _BPE_RIGHT, call="predicted_merges, {'first': 'xy', 'merges': 44}", message=r"ends with '\.'")

wrong_answer("check_bpe_prediction", "mistake", "the long text's first merge by minbpe's first-seen rule",
             _BPE_RIGHT, call="predicted_merges, {'first': 'ab', 'merges': 44}", message=r"tie rule 'first seen'")

wrong_answer("check_bpe_prediction", "method", "runs train_bpe on a short repetition ('ab.xy.' * 2, 5 "
             "merges) and copies its count: no reasoning about 2**40 repeats",
             _BPE_RIGHT, call="predicted_merges, {'first': 'y.', 'merges': 5}", message=r"occur twice\?")

wrong_answer("check_bpe_prediction", "edge", "doubles until one token is left (5 + 40)",
             _BPE_RIGHT, call="predicted_merges, {'first': 'y.', 'merges': 45}", message=r"when does training stop")

wrong_answer("check_bpe_prediction", "value", "the long-text part without its number of merges",
             _BPE_RIGHT, call="predicted_merges, {'first': 'y.'}", message=r"exactly the keys")
