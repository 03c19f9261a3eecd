"""The learner's task order: seeded, every task once per epoch, and resumable from its cursor alone."""

from r3l_learn.loop.train import TaskStream


def test_each_epoch_is_a_seeded_permutation_and_the_cursor_resumes_it():
    ids = [f"t{i}" for i in range(7)]
    stream = TaskStream(ids, seed=3)
    first = stream.take(7)
    assert sorted(first) == ids and first != ids  # a shuffle of all of them
    rest = stream.take(10)
    assert sorted(rest[:7]) == ids and rest[:7] != first  # a new order each epoch
    resumed = TaskStream(ids, seed=3, cursor=9)
    assert resumed.take(8) == rest[2:]
    assert TaskStream(ids, seed=3).take(17) == first + rest
