"""The messages about a Ray cluster, from what Ray raised or reported (no Ray started here;
tests/test_cluster.py checks each against a real two-node cluster)."""
import socket

from islands.ray_diagnostics import Waiting, gave_up, join_failure, probe, waiting_report

NODES = {"a" * 40: {"total": {"CPU": 1.0, "memory": 2.0**31}, "free": {"CPU": 0.0, "memory": 2.0**30}},
         "b" * 40: {"total": {"CPU": 1.0}, "free": {"CPU": 0.0}}}


def test_an_actor_that_fits_on_no_node_is_told_apart_from_one_that_waits_its_turn():
    report = waiting_report([Waiting("evaluator 0", {"GPU": 1.0}, placed=False),
                             Waiting("evaluator 1", {"CPU": 1.0}, placed=False),
                             Waiting("island 0", {"memory": 2.0**20}, placed=True)], NODES, 61.2)
    lines = report.splitlines()
    assert lines[0] == "Ray: after 61 s, 3 actor(s) of this run have not started:"
    assert lines[1] == "  evaluator 0 waits for GPU 1: no node of the cluster has that much in total"
    assert lines[2] == "  evaluator 1 waits for CPU 1: no node has that much free now"
    assert lines[3].startswith("  island 0: placed, starting")
    assert lines[4] == "  node aaaaaaaaaaaa: free/total CPU 0/1, GPU 0/0, memory 1.0 GiB/2.0 GiB"


def test_giving_up_names_the_actors_that_found_no_place():
    message = gave_up([Waiting("evaluator 2", {"CPU": 1.0}, placed=False),
                       Waiting("island 1", {}, placed=True)], NODES, 600)
    assert message.startswith("Ray could not start evaluator 2 in 600 s (ray.placement_timeout_s): fewer")


def _with_cause(text: str, cause: Exception) -> Exception:
    outer = ConnectionError(text)
    outer.__cause__ = cause  # as ray.init raises it: "Failed to connect", from the real reason
    return outer


def test_join_failures_say_why_in_one_line():
    auth = _with_cause("Failed to connect to Ray cluster at 10.0.0.1:6379",
                   RuntimeError("ray.exceptions.AuthenticationError: RPC error: InvalidAuthToken: missing"))
    assert "refused this process's token" in join_failure("10.0.0.1:6379", auth, "token")
    assert "authentication off (RAY_AUTH_MODE=unset)" in join_failure("10.0.0.1:6379", auth, None)
    mismatch = RuntimeError("Version mismatch: The cluster was started with:\n    Ray: 2.60.0\n    Python: 3.11.9\n"
                            "This process on node 10.0.0.2 was started with:\n    Ray: 2.59.0\n    Python: 3.12.1\n")
    line = join_failure("head:6379", mismatch, "token")
    assert line == ("cannot join the Ray cluster at head:6379: version mismatch: the cluster runs Ray 2.60.0 on "
                    "Python 3.11.9, this process Ray 2.59.0 on Python 3.12.1; every node and the driver need the "
                    "same Ray and Python")
    assert "\n" not in join_failure("auto", ConnectionError("Could not find any running Ray instance."), None)


def test_an_address_where_nothing_listens_is_found_at_once():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: connections are refused
        assert "nothing answers at 127.0.0.1:" in probe(f"127.0.0.1:{port}")
        s.listen(1)
        assert probe(f"127.0.0.1:{port}") is None
    assert probe("auto") is None and probe("ray://head:10001") is None
