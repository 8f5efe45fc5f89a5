"""Step-by-step addition (jaxrl/tasks/addition_steps.py): reference steps, the step
verifier, PRM data with correct and corrupted steps, the held-out split."""

from __future__ import annotations

import numpy as np
import pytest

from jaxrl.config import ConfigError
from jaxrl.tasks import Example, StepTask, make_task
from jaxrl.tasks.addition_steps import column_steps


def test_reference_steps_by_hand():
    # 357 + 486: 7+6 = 13, 5+8+1 = 14, 3+4+1 = 08, then the sum 843.
    assert column_steps(357, 486, 3) == ["13", "14", "08", "843"]
    assert column_steps(999, 999, 3) == ["18", "19", "19", "1998"]
    assert column_steps(100, 200, 3) == ["00", "00", "03", "300"]
    task = make_task("addition_steps", digits=3)
    assert isinstance(task, StepTask)
    assert task._example(0).answer == "00;00;02;200"  # 100 + 100


def test_examples_are_prompts_of_addition_with_step_answers():
    task = make_task("addition_steps", digits=2, num_eval=16)
    plain = make_task("addition", digits=2, num_eval=16)
    assert [e.prompt for e in task.eval_examples()] == [e.prompt for e in plain.eval_examples()]
    for example in task.sample_train(np.random.default_rng(0), 200) + task.eval_examples():
        a, b = (int(x) for x in example.prompt[:-1].split("+"))
        assert example.answer == ";".join(column_steps(a, b, 2))
        assert set(example.prompt + example.answer) <= set(task.alphabet)
        assert all(task.step_labels(example.answer, example))
    held_out = {e.prompt for e in task.eval_examples()}
    assert not held_out & {e.prompt for e in task.sample_train(np.random.default_rng(1), 3000)}


def test_verifier_labels_steps_up_to_the_first_error():
    task = make_task("addition_steps", digits=3)
    example = Example("357+486=", "13;14;08;843")
    assert task.step_labels("13;14;08;843", example) == [True, True, True, True]
    assert task.step_labels("13;15;09;853", example) == [True, False, False, False]
    assert task.step_labels("13;14;08;842", example) == [True, True, True, False]
    assert task.step_labels("03;14;08;843", example) == [False, False, False, False]
    assert task.step_labels("13;14", example) == [True, True]  # unfinished: no verdict later
    assert task.step_labels("13;14;08;843;1", example) == [True, True, True, True, False]
    assert task.step_labels("", example) == [False]
    # The outcome reads the final answer only.
    assert task.is_correct("99;99;99;843", example.answer)
    assert task.is_correct(" 13;14;08;843\n", example.answer)
    assert not task.is_correct("13;14;08;842", example.answer)
    assert not task.is_correct("843;", example.answer)


def test_corrupted_solutions_stay_consistent_after_their_first_error():
    task = make_task("addition_steps", digits=3)
    rng = np.random.default_rng(0)
    examples = task.sample_train(rng, 2000)
    solutions = task.labelled_solutions(rng, examples, corrupt_fraction=0.5)
    corrupted = 0
    first_errors = set()
    for example, solution in zip(examples, solutions, strict=True):
        assert solution.prompt == example.prompt and len(solution.steps) == 4
        completion = task.join_steps(solution.steps)
        # The labels are the verifier's: the generator and the verifier agree.
        assert list(solution.labels) == task.step_labels(completion, example)
        if all(solution.labels):
            assert completion == example.answer
            continue
        corrupted += 1
        k = solution.labels.index(False)
        first_errors.add(k)
        assert all(solution.labels[:k]) and not any(solution.labels[k:])
        a, b = (int(x) for x in example.prompt[:-1].split("+"))
        columns = [int(s) for s in solution.steps[:3]]
        assert all(0 <= c <= 19 for c in columns)
        if k < 3:  # later columns continue from the written carry; the sum from the digits
            carry = columns[k] // 10
            for j in range(k + 1, 3):
                assert columns[j] == (a // 10**j) % 10 + (b // 10**j) % 10 + carry
                carry = columns[j] // 10
            value = sum((c % 10) * 10**j for j, c in enumerate(columns)) + carry * 1000
            assert solution.steps[3] == str(value) != str(a + b)
        else:
            assert 1 <= abs(int(solution.steps[3]) - (a + b)) <= 9
    assert 900 <= corrupted <= 1100  # half of 2000
    assert first_errors == {0, 1, 2, 3}


def test_held_out_prm_examples_are_fixed_and_on_held_out_prompts():
    task = make_task("addition_steps", digits=2, num_eval=32, split_seed=3)
    first, again = task.prm_eval_examples(), task.prm_eval_examples()
    assert first == again
    assert [s.prompt for s in first] == [e.prompt for e in task.eval_examples()]
    assert 0 < sum(not all(s.labels) for s in first) < len(first)


def test_bad_input_is_refused():
    task = make_task("addition_steps", digits=2)
    with pytest.raises(ConfigError, match="corrupt_fraction=1.5"):
        task.labelled_solutions(np.random.default_rng(0), task.eval_examples(), 1.5)
    with pytest.raises(ConfigError, match="addition_steps takes no ':' argument"):
        make_task("addition_steps:x")
    with pytest.raises(ConfigError, match="digits"):
        make_task("addition_steps", digits=0)
