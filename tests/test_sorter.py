"""The digit sorters: contract, parameter count, permutation (in)variance, training, the zoo."""

import shutil

import pytest
import torch

import zoo
from training.train_sorter import train
from zoo.sorter import DigitSorter, accuracy, eval_set, random_digits, sorting_ceiling_without_positions


@pytest.mark.parametrize("use_pe", [True, False])
def test_parameter_count_and_contract(use_pe):
    model = DigitSorter(use_pos_encoding=use_pe).eval()
    assert model.num_parameters() == 101_258
    x = torch.randint(0, 10, (3, 8))
    logits = model(x)
    assert logits.shape == (3, 8, 10)
    out, maps = model(x, return_attention=True)
    assert torch.allclose(out, logits, atol=1e-5)  # our attention with maps, PyTorch's fused kernel without
    assert isinstance(maps, tuple) and len(maps) == 2
    for w in maps:
        assert w.shape == (3, 4, 8, 8)
        assert torch.allclose(w.sum(-1), torch.ones(3, 4, 8), atol=1e-6)


def test_permutation_equivariance_without_pe_and_not_with_it():
    torch.manual_seed(0)
    x = torch.randint(0, 10, (16, 8))
    perm = torch.tensor([3, 0, 7, 1, 6, 2, 5, 4])
    nope = DigitSorter(use_pos_encoding=False).eval()
    out, maps = nope(x, return_attention=True)
    out_p, maps_p = nope(x[:, perm], return_attention=True)
    assert torch.allclose(out_p, out[:, perm], atol=1e-5)
    for w, wp in zip(maps, maps_p, strict=True):  # rows and columns both move with the digits
        assert torch.allclose(wp, w[:, :, perm][:, :, :, perm], atol=1e-6)
    pe = DigitSorter(use_pos_encoding=True).eval()
    assert not torch.allclose(pe(x[:, perm]), pe(x)[:, perm], atol=1e-3)


def test_ceiling_is_expected_max_count_over_8():
    assert round(sorting_ceiling_without_positions(), 3) == 0.300
    # Brute force on a small case: 3 digits of 2 values -> multisets 000,001,011,111
    # max counts 3,2,2,3 with weights 1,3,3,1 -> E[max]=(3+6+6+3)/8=2.25 -> /3 = 0.75
    assert sorting_ceiling_without_positions(seq_len=3, n_digits=2) == pytest.approx(0.75)


def test_save_load_round_trip(tmp_path):
    torch.manual_seed(1)
    model = DigitSorter(use_pos_encoding=False).eval()
    model.save_pretrained(tmp_path)
    again = DigitSorter.from_pretrained(tmp_path)
    assert again.use_pos_encoding is False and not again.training
    x = torch.randint(0, 10, (4, 8))
    assert torch.equal(model(x), again(x))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["README.md", "config.json", "model.safetensors"]


def test_training_lowers_the_loss():
    model, record = train(True, steps=200, batch_size=64, seed=3, progress=False)
    curve = record["loss_curve"]
    assert curve[0][0] == 0 and curve[-1][0] == 199
    assert curve[-1][1] < 0.6 * curve[0][1]


def test_training_is_deterministic():
    a = train(True, steps=20, batch_size=16, seed=5, progress=False)[0]
    b = train(True, steps=20, batch_size=16, seed=5, progress=False)[0]
    for (ka, va), (kb, vb) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
        assert ka == kb and torch.equal(va, vb)


def test_eval_set_differs_from_training_stream():
    x_eval, _ = eval_set(100)
    x_train, y_train = random_digits(100, torch.Generator().manual_seed(0))
    assert not torch.equal(x_eval, x_train)
    assert torch.equal(y_train, x_train.sort(1).values)


@pytest.fixture(scope="module")
def thousand():
    return eval_set(1000, seed=777)


def test_committed_pe_sorter_sorts(thousand):
    pos, seq, _ = accuracy(zoo.load("sorter-pe"), *thousand)
    assert pos >= 0.999 and seq >= 0.99


def test_committed_nope_sorter_fails_at_the_ceiling(thousand):
    pos, seq, _ = accuracy(zoo.load("sorter-nope"), *thousand)
    ceiling = sorting_ceiling_without_positions()
    assert abs(pos - ceiling) < 0.03
    assert seq <= 0.005


def test_zoo_listing_and_bad_names():
    names = zoo.available()
    assert {"sorter-pe", "sorter-nope"} <= set(names)
    assert all(isinstance(d, str) and d for d in names.values())
    with pytest.raises(KeyError) as err:
        zoo.load("sorter-xl")
    assert "sorter-xl" in str(err.value) and "sorter-pe" in str(err.value) and "sorter-nope" in str(err.value)


def test_loaded_model_is_eval_and_strict(tmp_path, monkeypatch):
    model = zoo.load("sorter-pe")
    assert not model.training
    # A checkpoint with a missing tensor must not load silently.
    from safetensors.torch import load_file, save_file
    folder = tmp_path / "sorter-pe"
    shutil.copytree(zoo.CHECKPOINTS / "sorter-pe", folder)
    state = load_file(folder / "model.safetensors")
    state.pop("head.bias")
    save_file(state, str(folder / "model.safetensors"))
    with pytest.raises(RuntimeError, match="head.bias"):
        DigitSorter.from_pretrained(folder)


def test_tampered_checkpoint_is_refused(tmp_path, monkeypatch):
    shutil.copytree(zoo.CHECKPOINTS / "sorter-pe", tmp_path / "sorter-pe")
    weights = tmp_path / "sorter-pe" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    monkeypatch.setattr(zoo, "CHECKPOINTS", tmp_path)
    with pytest.raises(ValueError, match="model.safetensors: SHA-256 differs"):
        zoo.load("sorter-pe")


def test_zoo_holds_no_pickles():
    bad = [p for p in zoo.CHECKPOINTS.rglob("*") if p.suffix in {".bin", ".pt", ".pth", ".pkl", ".ckpt", ".pickle"}]
    assert bad == []
    assert all((zoo.CHECKPOINTS / n / "model.safetensors").is_file() for n in zoo.available())
