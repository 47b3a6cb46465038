"""The synthetic run generator writes a valid run whose stored arrays hold exactly what PlantedTruth says.

Checks here use plain Python sets and loops on the stored arrays (not the analyses), so they test the generator
independently of the code that later recovers the plants.
"""

from __future__ import annotations

import numpy as np
import pytest

from sst_interp.kernels.errors import UsageError
from sst_interp.store import Run
from sst_interp.synthetic import SyntheticSpec, write_synthetic_run
from sst_interp.synthetic.plan import halting_labels, layer_profile_weights

SPEC = dict(n_questions=6, depths=(1, 2, 3, 4), full_positions=6, sketch_positions=4, num_layers=5,
            hidden_size=256, top_k=24, batch_questions=3, seed=7)


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    spec = SyntheticSpec(**SPEC)
    path = tmp_path_factory.mktemp("syn") / "run"
    truth = write_synthetic_run(path, spec)
    return spec, truth, Run.open(path), path


def topk_set(vector: np.ndarray, k: int) -> set[int]:
    order = sorted(range(vector.size), key=lambda i: -abs(float(vector[i])))
    return set(order[:k])


def test_manifest_and_tables_match_the_spec(written):
    spec, truth, run, _ = written
    assert run.depths == [1, 2, 3, 4]
    assert run.hidden_size == 256 and run.num_layers == 5 and run.dtype == "float32"
    assert run.manifest["full_positions"] == 6 and run.manifest["sketch_positions"] == 4
    assert run.manifest["sketch_k"] == round(256 * 1024 / 5376) == spec.overlap_k == 49
    assert run.question_ids() == truth.question_ids == [f"syn{i:04d}" for i in range(6)]
    gens = run.generations()
    assert len(gens) == 6 * 4
    for depth in run.depths:
        block = next(run.hidden(depth))
        assert block.values.shape == (6, depth, 5, 256)
        assert block.iterations.tolist() == list(range(1, depth + 1))
        sk = next(run.sketch(depth))
        assert sk.positions.tolist() == [6, 7, 8, 9] and sk.top_indices.shape == (4, depth, 5, 49)


def test_stored_topk_sets_give_the_planted_overlap(written):
    spec, truth, run, _ = written
    k = spec.overlap_k
    q = 1
    block = next(run.hidden(4, question_ids=[truth.question_ids[q]]))
    expected = truth.overlap(1, 4)[q]
    for p in range(spec.full_positions):
        for layer in range(spec.num_layers):
            a = topk_set(block.values[p, 0, layer], k)
            b = topk_set(block.values[p, 3, layer], k)
            assert len(a & b) / k == pytest.approx(expected[p, layer], abs=1e-12)
    sk = next(run.sketch(3, question_ids=[truth.question_ids[q]]))
    exp23 = truth.overlap(2, 3)[q]
    for j, p in enumerate(sk.positions.tolist()):
        for layer in range(spec.num_layers):
            a, b = set(sk.top_indices[j, 1, layer].tolist()), set(sk.top_indices[j, 2, layer].tolist())
            assert len(a & b) / k == pytest.approx(exp23[p, layer], abs=1e-12)


def test_basin_cells_are_low_and_stable_cells_high(written):
    spec, truth, _, _ = written
    ov = truth.overlap(1, 4)  # [Q, P, L]
    weights = layer_profile_weights("paper", spec.num_layers)
    shifting = weights > 0
    basin_cells = ov[truth.basin][:, shifting]
    assert basin_cells.size and basin_cells.max() <= 1 - 0.35 * spec.basin_amplitude[0] + 1e-9
    stable_floor = 1 - 3 * np.floor(spec.stable_step * spec.overlap_k) / spec.overlap_k
    assert ov[~truth.basin].min() >= stable_floor
    assert truth.basin[:, 0].all()  # position 0 is universal


def test_traces_and_logits_hold_the_planted_divergence_flips_and_gaps(written):
    spec, truth, run, _ = written
    gens = run.generations().set_index(["question_id", "depth"])
    n_top = min(100, spec.top_k)
    for q, qid in enumerate(truth.question_ids):
        base = np.asarray(gens.loc[(qid, 1), "token_ids"])
        for j, depth in enumerate(truth.depths):
            tokens = np.asarray(gens.loc[(qid, depth), "token_ids"])
            assert tokens.tolist() == truth.tokens[(qid, depth)].tolist()
            diff = [i for i in range(tokens.size) if tokens[i] != base[i]]
            assert (diff[0] if diff else -1) == truth.divergence[q, j]
        block = next(run.logits(4, question_ids=[qid]))
        for p in range(spec.full_positions):
            lp = block.top_logprobs[p, 0]
            assert float(lp[0] - lp[1]) == truth.gaps[q, p]  # exact: multiples of 1/16
            first_ids = block.top_ids[p, 0].tolist()
            for i in range(4):
                assert first_ids.index(int(block.argmax[p, i])) == truth.winners[q, p, i]
                gone = set(first_ids[:n_top]) - set(block.top_ids[p, i, :n_top].tolist())
                assert len(gone) == (truth.replaced[q, p, i] if i else 0)
            np.testing.assert_array_equal(block.tracked_logprobs[p, 0], block.top_logprobs[p, 0])
        # the emitted token at a window position is the last iteration's argmax
        for depth in truth.depths:
            lb = next(run.logits(depth, question_ids=[qid]))
            assert lb.argmax[:, depth - 1].tolist() == truth.tokens[(qid, depth)][:spec.full_positions].tolist()


def test_halting_labels_follow_the_design_rule_and_the_feature_separates_them(tmp_path):
    correct = np.array([[1, 0, 0, 0], [0, 1, 0, 1], [0, 0, 0, 0], [1, 1, 1, 1]], dtype=bool)
    expected = np.array([[1, 1, 1, 0], [0, 1, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]], dtype=bool)
    for row, exp in zip(correct, expected):
        np.testing.assert_array_equal(halting_labels([1, 2, 3, 4], row, 4), exp)
    spec = SyntheticSpec(n_questions=4, full_positions=2, num_layers=4, hidden_size=128, correct=correct,
                         halting_layer=2, halting_dims=(5, 17, 40), batch_questions=4)
    truth = write_synthetic_run(tmp_path / "run", spec)
    np.testing.assert_array_equal(truth.halt, expected)
    run = Run.open(tmp_path / "run")
    for q, block in enumerate(run.hidden(4, layers=[2], positions=[0])):
        feature = block.values[0, :, 0][:, [5, 17, 40]]  # [iterations, dims]
        signs = np.sign(feature)
        assert (signs == np.where(expected[q], 1, -1)[:, None]).all()
        assert (np.abs(feature) >= 0.5).all()
    assert (run.generations().sort_values(["question_id", "depth"])["correct"].to_numpy()
            == correct.reshape(-1)).all()


def test_same_spec_is_identical_and_resume_adds_nothing(tmp_path, written):
    spec, truth, run, path = written
    again = write_synthetic_run(path, spec)  # resume: everything complete, nothing rewritten
    assert len(Run.open(path).generations()) == 6 * 4
    np.testing.assert_array_equal(again.swaps, truth.swaps)
    other = write_synthetic_run(tmp_path / "copy", SyntheticSpec(**{**SPEC, "batch_questions": 5}))
    np.testing.assert_array_equal(other.winners, truth.winners)
    a = next(run.hidden(3, question_ids=["syn0004"])).values
    b = next(Run.open(tmp_path / "copy").hidden(3, question_ids=["syn0004"])).values
    np.testing.assert_array_equal(a, b)
    different = write_synthetic_run(tmp_path / "seed", SyntheticSpec(**{**SPEC, "seed": 8}))
    assert not np.array_equal(different.swaps, truth.swaps)


def test_explicit_gaps_are_planted_exactly(tmp_path):
    gaps = np.array([[0.0, 0.0625, 2.5], [6.375, 0.125, 1.0]])
    divergence = np.array([[-1, 0, 0, 0], [-1, 2, 1, 2]])
    spec = SyntheticSpec(n_questions=2, full_positions=3, num_layers=2, hidden_size=128, gaps=gaps,
                         divergence=divergence, batch_questions=2)
    truth = write_synthetic_run(tmp_path / "run", spec)
    np.testing.assert_array_equal(truth.gaps, gaps)
    for q, block in enumerate(Run.open(tmp_path / "run").logits(4)):
        lp = block.top_logprobs[:, 0]
        np.testing.assert_array_equal(lp[:, 0] - lp[:, 1], gaps[q])
        np.testing.assert_array_equal(truth.divergence[q], divergence[q])
        for j in (1, 2, 3):  # the run at depth j+1 first emits a different token at the planted position
            p = divergence[q, j]
            assert block.argmax[p, j] != block.argmax[p, 0]
            assert (block.argmax[:p, j] == block.argmax[:p, 0]).all()
        for p in range(3):
            for i in range(4):
                assert block.top_ids[p, 0].tolist().index(int(block.argmax[p, i])) == truth.winners[q, p, i]


def test_exception_questions_diverge_before_their_first_basin(tmp_path):
    spec = SyntheticSpec(n_questions=4, n_exceptions=2, full_positions=5, num_layers=3, hidden_size=128,
                         batch_questions=4)
    truth = write_synthetic_run(tmp_path / "run", spec)
    for q in range(2):
        assert not truth.basin[q, 0] and truth.basin[q, 2]
        assert min(d for d in truth.divergence[q] if d >= 0) == 0
    assert truth.basin[2:, 0].all()


def test_bfloat16_run_keeps_the_planted_sets(tmp_path):
    spec = SyntheticSpec(n_questions=2, depths=(1, 2), full_positions=3, num_layers=3, hidden_size=128,
                         dtype="bfloat16", batch_questions=2)
    truth = write_synthetic_run(tmp_path / "run", spec)
    run = Run.open(tmp_path / "run")
    assert run.dtype == "bfloat16"
    block = next(run.hidden(2))
    k = spec.overlap_k
    for p in range(3):
        for layer in range(3):
            a, b = topk_set(block.values[p, 0, layer], k), topk_set(block.values[p, 1, layer], k)
            assert len(a & b) / k == pytest.approx(truth.overlap(1, 2)[0, p, layer])


@pytest.mark.parametrize("bad", [dict(depths=(0, 1)), dict(dtype="float16"), dict(n_questions=0),
                                 dict(correctness_kinds={"sometimes": 1.0}), dict(halting_dims=(999,)),
                                 dict(correct=np.ones((3, 4), bool))])
def test_bad_specs_are_usage_errors(bad):
    with pytest.raises(UsageError):
        SyntheticSpec(**{**dict(n_questions=2, hidden_size=128), **bad})


def test_single_depth_run_plants_no_shift(tmp_path):
    truth = write_synthetic_run(tmp_path / "run", SyntheticSpec(n_questions=2, depths=(1,), full_positions=3,
                                                                num_layers=2, hidden_size=128))
    assert not truth.basin.any() and (truth.divergence == -1).all()
    assert Run.open(tmp_path / "run").depths == [1]
