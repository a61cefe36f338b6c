"""Two CPU processes (torchrun, gloo) reach the weights of one process on the whole batch."""

import os
import socket
import subprocess
import sys
import textwrap

import pytest
import torch
from safetensors.torch import load_file

from fundamentallm.distributed import init_distributed, is_distributed, is_main_process

SETUP = """
import torch
from fundamentallm import Transformer, TransformerConfig
from fundamentallm.training import TrainConfig, Trainer

def make_trainer(padded=False):
    torch.manual_seed(0)
    model = Transformer(TransformerConfig(vocab_size=16, d_model=32, num_heads=2, num_layers=1,
                                          max_seq_len=16))
    ids = torch.randint(16, (3000,), generator=torch.Generator().manual_seed(0))
    cfg = TrainConfig(max_steps=4, warmup_steps=1, batch_size=8, progress=False, device="cpu",
                      lr=3e-3)
    if not padded:
        return Trainer(model, ids[:2500], ids[2500:], cfg)
    # Sequences with 1..16 real targets (the rest -100): the ranks' slices hold different counts,
    # so the loss must be weighted by tokens, not averaged per rank.
    x, y = ids[:2048].view(128, 16), ids[1:2049].view(128, 16).clone()
    keep = torch.randint(1, 17, (128, 1), generator=torch.Generator().manual_seed(1))
    y[torch.arange(16)[None, :] >= keep] = -100
    data = torch.utils.data.TensorDataset(x, y)
    return Trainer(model, data, data, cfg)
"""


@pytest.mark.parametrize("padded", [False, True], ids=["stream", "ignored-targets"])
def test_two_processes_match_one_process(tmp_path, padded):
    script = tmp_path / "ddp.py"
    script.write_text(SETUP + textwrap.dedent(f"""
        from safetensors.torch import save_file
        from fundamentallm.distributed import cleanup, init_distributed, is_main_process
        rank, world_size, device = init_distributed()
        assert world_size == 2
        trainer = make_trainer({padded})
        trainer.fit()
        val = trainer.evaluate()["val_loss"]
        if is_main_process():
            state = {{k: v.contiguous() for k, v in trainer.model.state_dict().items()
                      if k != "lm_head.weight"}}
            save_file(state, {str(tmp_path / "ddp.safetensors")!r}, metadata={{"val_loss": repr(val)}})
        cleanup()
    """))
    # Start the two workers with the environment torchrun would give them (skipping the launcher
    # process keeps the test fast); the CLI is launched with torchrun itself.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(port)}
    procs = [subprocess.Popen([sys.executable, str(script)], cwd=tmp_path,
                              env={**env, "RANK": str(r), "LOCAL_RANK": str(r)}) for r in range(2)]
    assert [p.wait(timeout=300) for p in procs] == [0, 0]

    namespace = {}
    exec(SETUP, namespace)  # noqa: S102 (our own constant source)
    single = namespace["make_trainer"](padded)  # one process, the whole batch of 8
    single.fit()
    ddp = load_file(str(tmp_path / "ddp.safetensors"))
    for name, value in ddp.items():
        torch.testing.assert_close(value, single.model.state_dict()[name], rtol=1e-4, atol=1e-5)
    assert not torch.equal(ddp["blocks.0.attn.out_proj.weight"],
                           namespace["make_trainer"]().model.blocks[0].attn.out_proj.weight)


def test_helpers_outside_torchrun(monkeypatch):
    for key in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(key, raising=False)
    assert not is_distributed() and is_main_process()
    with pytest.raises(RuntimeError, match="start the processes with torchrun"):
        init_distributed()
