"""A node dies mid-collect: on a 2-node ``ray.cluster_utils.Cluster`` on this machine (loopback only), the node that
holds the env workers is removed (its processes SIGKILLed); the workers are rebuilt on a node that joins, from their
slots' checkpoints, and the groups come out identical to the thread-pool backend's. Its own module: a Cluster is a
Ray instance of its own, apart from test_ray_collector.py's local one."""

import pytest

from wrappers.collectors.local import LocalCollector

ray = pytest.importorskip("ray", reason='the ray extra is not installed (pip install -e ".[ray]")')
pytest.importorskip("transformers")

from ray.cluster_utils import Cluster  # noqa: E402
from test_ray_collector import collect  # noqa: E402

from wrappers.collectors.ray import RayCollector  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.slow]

# The head notices a dead node within ~3 s instead of Ray's default ~30 s.
FAST_HEALTH_CHECKS = {
    "health_check_initial_delay_ms": 0,
    "health_check_period_ms": 1000,
    "health_check_failure_threshold": 3,
}


@pytest.fixture
def cluster():
    if ray.is_initialized():
        pytest.skip("a Ray instance is already running in this process")
    # The head holds no CPUs (it only coordinates, as on a real cluster): env workers go to the worker nodes.
    head = {"num_cpus": 0, "include_dashboard": False, "_system_config": FAST_HEALTH_CHECKS}
    cluster = Cluster(initialize_head=True, connect=True, head_node_args=head)
    try:
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()


def test_a_node_removed_mid_collect_is_survived_with_identical_groups(cluster):
    env_id = "r3l/Countdown-v0"
    with LocalCollector(env_id, workers=1) as local:
        expected = collect(env_id, local)
    first = cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    with RayCollector(env_id, workers=2, num_cpus=0.5, start_timeout_s=300) as remote:
        moved = []

        def remove_node(n):
            if n == 3:  # mid-episode: after the bases' first turn
                assert set(remote.node_ids()) == {first.node_id}
                cluster.remove_node(first, allow_graceful=False)
                moved.append(cluster.add_node(num_cpus=1))  # the replacement node joins

        assert collect(env_id, remote, on_call=remove_node) == expected
        assert remote.replacements == 2
        assert set(remote.node_ids()) == {moved[0].node_id}
