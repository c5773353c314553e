"""ASTRAL's learned difficulty head (selectors.md §3; lze_bench/predictor): the authors' file format, the
NumPy side the selector runs, the training recipe, and the selector reading the head through a FeatureFn."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lze_bench.errors import LzeBenchError
from lze_bench.predictor.checkpoint import load_head, read_head, save_head
from lze_bench.predictor.head import DifficultyHead
from lze_bench.predictor.train import LabelSet, TrainRecipe, batch_flops, evaluate, lr_factor, train_head
from lze_bench.selectors.astral_predict import head_predict

# The authors' state dict of FewShotRegressor(has_embeddings=True, method="residual", num_layers=3,
# scaling="group_logit_temp"), d = input size, h = 896 (adaptive_difficulty_prediction/model.py).
def authors_keys(d: int, h: int) -> dict:
    keys = {}
    for proj in ("query_proj", "ref_proj"):
        base = f"regressor.sim_head.{proj}"
        keys.update({f"{base}.0.weight": (d,), f"{base}.0.bias": (d,), f"{base}.1.weight": (h, d),
                     f"{base}.1.bias": (h,), f"{base}.4.weight": (h, h), f"{base}.4.bias": (h,),
                     f"{base}.7.weight": (h, h), f"{base}.7.bias": (h,), f"{base}.8.weight": (h,),
                     f"{base}.8.bias": (h,)})
    keys.update({"regressor.mlp.0.weight": (10, 2), "regressor.mlp.0.bias": (10,), "regressor.mlp.2.weight": (2, 10),
                 "regressor.mlp.2.bias": (2,)})
    return keys


def random_head(d=12, h=16, seed=0) -> DifficultyHead:
    torch.manual_seed(seed)
    head = DifficultyHead(d, h)
    with torch.no_grad():
        for p in head.parameters():  # LayerNorm defaults are 1/0: perturb everything so a swapped key shows
            p.add_(0.3 * torch.randn_like(p))
    return head.eval()


def test_head_state_dict_has_the_authors_keys_and_shapes():
    head = DifficultyHead(1536)
    assert {k: tuple(v.shape) for k, v in head.state_dict().items()} == authors_keys(1536, 896)


def test_checkpoint_loader_round_trips_a_head_saved_in_the_authors_format(tmp_path):
    head = random_head()
    path = save_head(head, tmp_path / "adaptive_difficulty_prediction_model_test.pt", encoder="enc-a",
                     config={"ref_size": 8})
    body = torch.load(path, weights_only=True)
    assert set(body) == {"model_state_dict", "config", "train_metrics"}
    assert body["config"]["model_name"] == "enc-a" and body["config"]["scaling"] == "group_logit_temp"
    # what the authors' TeacherModelWorker.init_model keeps: the regressor.* entries
    assert {k for k in body["model_state_dict"] if k.startswith("regressor.")} == set(authors_keys(12, 16))
    loaded, config = load_head(path, encoder="enc-a", embedding_dim=12)
    q, r, y = torch.randn(5, 12), torch.randn(7, 12), torch.rand(7)
    with torch.no_grad():
        assert torch.equal(loaded(q, r, y), head(q, r, y))
    assert config["ref_size"] == 8


def test_checkpoint_loader_reads_a_file_without_our_metadata(tmp_path):
    """A released head: `model_state_dict` (possibly with other entries) and the authors' config."""
    head = random_head(d=6, h=8)
    state = {**head.state_dict(), "encoder.encoder.embed_tokens.weight": torch.zeros(3, 6)}
    torch.save({"model_state_dict": state, "config": {"model_name": "Qwen/Qwen2.5-Math-1.5B-Instruct",
                                                      "scaling": "group_logit_temp", "num_layers": 3}},
               tmp_path / "released.pt")
    loaded, _ = load_head(tmp_path / "released.pt", encoder="Qwen/Qwen2.5-Math-1.5B-Instruct", embedding_dim=6)
    assert (loaded.input_size, loaded.hidden, loaded.num_layers) == (6, 8, 3)
    torch.save({"model_state_dict": head.state_dict()}, tmp_path / "bare.pt")  # no config: width is checked only
    assert load_head(tmp_path / "bare.pt", encoder="any", embedding_dim=6)[0].hidden == 8


def test_checkpoint_loader_refuses_another_encoder_and_foreign_files(tmp_path):
    path = save_head(random_head(), tmp_path / "head.pt", encoder="enc-a")
    with pytest.raises(LzeBenchError, match="trained on embeddings of 'enc-a', not 'enc-b'"):
        load_head(path, encoder="enc-b", embedding_dim=12)
    torch.save({"model_state_dict": random_head().state_dict()}, tmp_path / "bare.pt")
    with pytest.raises(LzeBenchError, match="takes 12-dim embeddings"):
        load_head(tmp_path / "bare.pt", encoder="enc-a", embedding_dim=64)
    torch.save({"model_state_dict": {"w": torch.zeros(2)}}, tmp_path / "other.pt")
    with pytest.raises(LzeBenchError, match="not an ASTRAL attention head"):
        read_head(tmp_path / "other.pt")
    torch.save({"model_state_dict": random_head().state_dict(), "config": {"scaling": "platt"}}, tmp_path / "p.pt")
    with pytest.raises(LzeBenchError, match="scaling='platt'"):
        read_head(tmp_path / "p.pt")
    with pytest.raises(LzeBenchError, match="no such file"):
        read_head(tmp_path / "missing.pt")


def test_numpy_head_predict_equals_the_torch_head_then_the_linear_recalibration():
    """The selector's NumPy side (astral_predict.head_predict) = the torch head + teacher_utils' LinearRegression
    fit on the reference prompts' own predictions."""
    head = random_head()
    ref = np.array([3, 7, 11, 19, 23, 31])
    y_ref = np.array([0.0, 0.25, 0.5, 0.5, 0.875, 1.0])
    for seed in (0, 1):  # two different pools, one after the other: every row is computed each time
        emb = np.random.default_rng(seed).standard_normal((40, 12)).astype(np.float32)
        with torch.no_grad():
            p = head(torch.as_tensor(emb), torch.as_tensor(emb[ref]), torch.as_tensor(y_ref, dtype=torch.float32))
        p = p.double().numpy()
        slope, intercept = np.polyfit(p[ref], y_ref, 1)
        query, key = head.project(emb)
        raw, p_hat = head_predict(query, key[ref], y_ref, head.calibration_arrays(), query[ref])
        np.testing.assert_allclose(raw, p, atol=2e-6)
        np.testing.assert_allclose(p_hat, slope * p + intercept, atol=2e-5)


def torch_head_reference(head, emb, ref, y_ref, std=None) -> np.ndarray:
    """The torch head's prediction; `std` replaces the references' unbiased std (one reference: ours is 0)."""
    q, r = torch.as_tensor(emb), torch.as_tensor(emb[ref])
    y = torch.as_tensor(np.asarray(y_ref, dtype=np.float32))[None, :].expand(len(emb), -1)
    with torch.no_grad():
        if std is None:
            return head(q, r, y).double().numpy()
        base = head.regressor.sim_head(q, r, y)
        stats = torch.stack([y.mean(dim=-1), torch.full((len(emb),), float(std))], dim=-1)
        temp_bias = head.regressor.mlp(stats)
        temperature = torch.nn.functional.softplus(temp_bias[:, 0]).clamp(1e-2, 10.0)
        out = torch.sigmoid(torch.logit(base.clamp(1e-4, 1 - 1e-4)) / temperature + torch.tanh(temp_bias[:, 1]))
        return out.double().numpy()


@pytest.mark.parametrize("bias", [-40.0, 0.0, 40.0])  # softplus(out_0) far below 0.01, ordinary, far above 10
@pytest.mark.parametrize("refs,labels", [([3], None), ([3, 7], None), ([3, 7, 11, 19], None),
                                         ([3, 7, 11, 19], 0.0), ([3, 7, 11, 19], 1.0)])  # base 0 or 1: clipped
def test_calibration_clamps_and_small_reference_sets_match_the_torch_head(bias, refs, labels):
    from lze_bench.selectors.astral_predict import calibrate, softmax_base

    head = random_head(seed=2)
    with torch.no_grad():
        head.regressor.mlp[2].bias[0] = bias
    emb = np.random.default_rng(5).standard_normal((20, 12)).astype(np.float32)
    ref = np.array(refs)
    y_ref = np.array([0.25, 0.75, 0.5, 1.0])[:ref.size] if labels is None else np.full(ref.size, labels)
    query, key = head.project(emb)
    keys = key[ref].T / np.float32(np.sqrt(key.shape[1]))
    got = calibrate(softmax_base(query, keys, y_ref), y_ref, head.calibration_arrays())
    expected = torch_head_reference(head, emb, ref, y_ref, std=0.0 if ref.size == 1 else None)
    np.testing.assert_allclose(got, expected, atol=2e-6)


def test_head_softmax_is_stable_at_large_scores():
    """Scores of several thousand (a head with large output norms): the max is subtracted before exp."""
    head = random_head(seed=3)
    with torch.no_grad():
        for proj in (head.regressor.sim_head.query_proj, head.regressor.sim_head.ref_proj):
            proj[-1].weight.mul_(40.0)
    emb = np.random.default_rng(6).standard_normal((20, 12)).astype(np.float32)
    ref, y_ref = np.array([1, 4, 9]), np.array([0.0, 0.5, 1.0])
    query, key = head.project(emb)
    raw, _ = head_predict(query, key[ref], y_ref, head.calibration_arrays(), query[ref])
    assert np.isfinite(raw).all()
    np.testing.assert_allclose(raw, torch_head_reference(head, emb, ref, y_ref), atol=2e-6)


def test_lr_schedule_is_linear_warmup_then_linear_decay():
    assert [lr_factor(s, 2, 10) for s in (0, 1, 2, 6, 10, 11)] == [0.0, 0.5, 1.0, 0.5, 0.0, 0.0]


def synthetic_labels(questions=300, models=3, d=16, seed=0) -> LabelSet:
    """Pass rates a function of one small embedding coordinate (which cosine similarity hardly sees), shifted
    per model (a stronger model)."""
    rng = np.random.default_rng(seed)
    emb = rng.standard_normal((questions, d)).astype(np.float32)
    emb[:, 0] *= 0.5
    skill = np.linspace(-1, 1, models)[:, None]
    rates = 1 / (1 + np.exp(-(5.0 * emb[None, :, 0] + skill)))
    order = rng.permutation(questions)
    return LabelSet(emb, rates.astype(np.float32), np.sort(order[:100]), np.sort(order[100:160]))


def test_training_learns_difficulty_the_kernel_cannot_see():
    """On labels driven by one embedding coordinate, the trained head ranks held-out questions far better than
    the cosine kernel over the same embeddings (both recalibrated on the same references)."""
    labels = synthetic_labels()
    recipe = TrainRecipe(epochs=30, batch_size=64, ref_size=32, hidden_size=32, num_layers=3, warmup_steps=10)
    head, result = train_head(labels, recipe)
    assert result["losses"][-1] < result["losses"][0]
    batches = -(-3 * 240 // 64)
    assert result["steps"] == batches * 30
    assert result["flops"] == 30 * (3 * batch_flops(head, 64, 32) * (batches - 1) + 3 * batch_flops(head, 3 * 240 % 64, 32))
    metrics = evaluate(head, labels, recipe)
    assert metrics["questions"] == 60 and metrics["models"] == 3
    assert metrics["trained"]["spearman"] > 0.6 > metrics["kernel"]["spearman"] + 0.2
    assert metrics["trained"]["mae"] < metrics["kernel"]["mae"]


def test_astral_selects_with_the_head_and_measures_the_kernel_beside_it():
    from lze_bench.predictor.features import HeadFeatures
    from lze_bench.selectors import RolloutBatch, build_selector, step_rng
    from lze_bench.selectors.astral import AstralConfig
    from lze_bench.selectors.astral_predict import kernel_predict

    head = random_head()
    rng = np.random.default_rng(1)
    emb = rng.standard_normal((30, 12)).astype(np.float32)
    query, key = head.project(emb)
    features = HeadFeatures(lambda name, ids: pytest.fail(f"asked the backend for {name}"), emb, query, key,
                            head.calibration_arrays())
    sel = build_selector(AstralConfig(predictor="checkpoint", predictor_path="x.pt", predictor_encoder="e",
                                      ref_size=6, mu=1), num_prompts=30, batch_size=4)
    assert sel.requires == ("head_query", "head_key", "head_embedding", "head_calibration")
    ref = sel.probe(0, step_rng(0, 0, 3))
    rates = rng.integers(0, 5, 30) / 4
    rewards = (np.arange(4)[None, :] < np.round(4 * rates)[:, None]).astype(np.float32)
    sel.observe_probe(RolloutBatch(prompt_ids=ref, rewards=rewards[ref], step=0))
    ids = sel.select_rollout(np.arange(30), 4, 0, step_rng(0, 0, 0), features)
    expected = head_predict(query, key[ref], sel.y_ref, head.calibration_arrays(), query[ref])[1]
    np.testing.assert_array_equal(sel.p_hat, expected)
    np.testing.assert_array_equal(sel.p_kernel, kernel_predict(emb, emb[ref], sel.y_ref, 0.1)[1])
    sel.observe(RolloutBatch(prompt_ids=ids, rewards=rewards[ids], step=0))
    metrics = sel.step_metrics()
    assert metrics["astral_pred_mae"] == pytest.approx(np.abs(expected[ids] - rates[ids]).mean())
    assert metrics["astral_kernel_mae"] == pytest.approx(np.abs(sel.p_kernel[ids] - rates[ids]).mean())


@pytest.mark.parametrize("overrides,match", [
    (["selector.predictor=checkpoint"], "selector.predictor_path"),
    (["selector.predictor=learned"], "unknown predictor 'learned'"),
])
def test_predictor_config_errors_are_one_line(overrides, match):
    from lze_bench.config import compose, to_objects

    with pytest.raises(LzeBenchError, match=match):
        to_objects(compose("train", ["selector=astral", *overrides]))


# --- backend=openrlhf: refusals before a cluster starts (`train --dry-run` runs the same checks) -------------------


def openrlhf_dry_run(tmp_path, *extra):
    from typer.testing import CliRunner

    from lze_bench.cli import app

    overrides = ["backend=openrlhf", "model=Qwen/Qwen2.5-Math-1.5B", "backend.gpus_per_node=1", "selector=astral",
                 f"run_dir={tmp_path / 'run'}", *extra]
    return CliRunner().invoke(app, ["train", *overrides, "--dry-run"])


def tiny_encoder_config(path, width: int):
    """An encoder whose config (all a launch check reads) is on this machine."""
    from transformers import Qwen2Config

    Qwen2Config(hidden_size=width, intermediate_size=2 * width, num_hidden_layers=1, num_attention_heads=2,
                num_key_value_heads=1, vocab_size=64).save_pretrained(path)
    return str(path)


def test_openrlhf_refuses_a_head_it_cannot_serve_in_one_line(tmp_path):
    from tests.test_train_local import one_error_line

    line = one_error_line(openrlhf_dry_run(tmp_path, "selector.predictor=trained"))  # its head step: test_openrlhf_head
    assert "backend.predictor.labelers is empty" in line
    missing = tmp_path / "nowhere" / "head.pt"
    line = one_error_line(openrlhf_dry_run(tmp_path, "selector.predictor=checkpoint",
                                           f"selector.predictor_path={missing}", "selector.predictor_encoder=enc-a"))
    assert f"selector.predictor_path={str(missing)!r}: no such file" in line
    head = save_head(random_head(), tmp_path / "head.pt", encoder="enc-a")
    line = one_error_line(openrlhf_dry_run(tmp_path, "selector.predictor=checkpoint", f"selector.predictor_path={head}",
                                           "selector.predictor_encoder=enc-b"))
    assert "trained on embeddings of 'enc-a', not 'enc-b'; set selector.predictor_encoder=enc-a" in line
    # a head file that names no encoder (a bare released state dict): the width of an encoder found here is checked
    encoder = tiny_encoder_config(tmp_path / "encoder", 16)
    torch.save({"model_state_dict": random_head(d=12).state_dict()}, tmp_path / "bare.pt")
    line = one_error_line(openrlhf_dry_run(tmp_path, "selector.predictor=checkpoint",
                                           f"selector.predictor_path={tmp_path / 'bare.pt'}",
                                           f"selector.predictor_encoder={encoder}"))
    assert f"takes 12-dim embeddings, but encoder '{encoder}' gives 16" in line


def test_openrlhf_dry_run_accepts_a_head_of_its_encoder(tmp_path):
    encoder = tiny_encoder_config(tmp_path / "encoder", 12)
    head = save_head(random_head(d=12), tmp_path / "head.pt", encoder=encoder)
    result = openrlhf_dry_run(tmp_path, "selector.predictor=checkpoint", f"selector.predictor_path={head}",
                              f"selector.predictor_encoder={encoder}")
    assert result.exit_code == 0, result.output
    assert "lze_bench.backends.openrlhf.entry" in result.output
    assert f"# astral's learned head {head} (trained elsewhere, checked above): the frozen encoder {encoder}" \
        in result.output


# --- through `lze-bench train` on the local backend (tiny policy, tiny recipe) -----------------------------------


def test_trained_head_run_records_its_offline_cost_and_a_checkpoint_run_reuses_the_head(tmp_path):
    import json

    from tests.test_train_local import ok, one_error_line, train

    from lze_bench.ledger import read_ledger

    cache = tmp_path / "cache"
    recipe = ["selector=astral", "selector.ref_size=6", "selector.buffer_size=8", "trainer.steps=3",
              "backend.predictor.labeler_steps=[2,3]", "backend.predictor.sft_questions=16",
              "backend.predictor.ref_candidates=24", "backend.predictor.samples=2", "backend.predictor.epochs=2",
              "backend.predictor.hidden_size=32"]
    ok(train(tmp_path / "trained", cache, *recipe, "selector.predictor=trained"))
    record = json.loads((tmp_path / "trained" / "offline_flops.json").read_text())
    flops = record["flops"]
    assert record["predictor"] == "trained" and len(record["labelers"]) == 2 and record["questions_labeled"] == 80
    assert min(flops["labeling"], flops["encoder"], flops["training"]) > 0
    assert flops["total"] == flops["labeling"] + flops["encoder"] + flops["training"]
    assert set(record["validation"]) == {"trained", "kernel", "questions", "models"}
    ledger = read_ledger(tmp_path / "trained")
    assert ledger["astral_pred_mae"].notna().all() and ledger["astral_kernel_mae"].notna().all()
    assert int(ledger["flops_select"].sum()) == 0  # the encoder's passes are offline, not a step's compute
    head, encoder = record["head"], record["encoder"]
    assert encoder == record["labelers"][-1]  # the last labeller snapshot is the frozen encoder
    # a cache built by a clone that has since moved: its recorded encoder path is gone; the run loads the
    # snapshot from where this checkout has it and reuses the head (no second build)
    info_path = next((cache / "predictor").glob("*/info.json"))
    info = json.loads(info_path.read_text())
    info["encoder"]["path"] = str(tmp_path / "moved-away" / "step_000003")
    info_path.write_text(json.dumps(info))
    ok(train(tmp_path / "moved", cache, *recipe, "selector.predictor=trained"))
    assert json.loads((tmp_path / "moved" / "offline_flops.json").read_text())["flops"] == flops
    ok(train(tmp_path / "ckpt", cache, *recipe, "selector.predictor=checkpoint", f"selector.predictor_path={head}",
             f"selector.predictor_encoder={encoder}"))
    assert json.loads((tmp_path / "ckpt" / "offline_flops.json").read_text())["flops"]["labeling"] is None
    line = one_error_line(train(tmp_path / "wrong", cache, *recipe, "selector.predictor=checkpoint",
                                f"selector.predictor_path={head}", f"selector.predictor_encoder={record['labelers'][0]}"))
    assert f"trained on embeddings of '{encoder}'" in line


def test_numpy_head_rows_beyond_one_chunk():
    """More query rows than one chunk of scores (CHUNK_ROWS): every row gets its own softmax (float64 reference)."""
    from lze_bench.selectors.astral_predict import CHUNK_ROWS, softmax_base

    rng = np.random.default_rng(8)
    rows = rng.standard_normal((CHUNK_ROWS + 300, 6)).astype(np.float32)
    keys = rng.standard_normal((6, 5)).astype(np.float32)
    y_ref = np.array([0.0, 0.25, 0.5, 0.75, 1.0])
    scores = rows.astype(np.float64) @ keys.astype(np.float64)
    weights = np.exp(scores - scores.max(axis=1, keepdims=True))
    np.testing.assert_allclose(softmax_base(rows, keys, y_ref), weights @ y_ref / weights.sum(axis=1), atol=1e-5)
