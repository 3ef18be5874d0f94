"""NOSPACE whose live data fills the quota, with spec.maintenance.spaceRecovery.maxVolumeSize
(qk_plan_space.make_room): the volumes grow in place (doubled, at most to the limit), the
operator waits for them, rolls the members onto the larger quota with the alarm still raised,
then gives the space back; without the policy, with a quota set by hand, a class that cannot
expand or volumes at the limit, it waits and says why. And the spec read with the size grown
(qk_options.grown_spec)."""

from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_options import (
    bytes_quantity,
    config_hash,
    effective_options,
    grown_spec,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_plan import (
    etcd_cluster_plan as plan,
)
from test_config_plan import cluster
from test_volume_growth import claim

MIB = 1 << 20
SMALL, LARGE = 128 * MIB, 256 * MIB
SMALL_CONFIG = {"options": {"quotaBackendBytes": 64 * MIB}, "podTemplate": {}}
LARGE_CONFIG = {"options": {"quotaBackendBytes": 128 * MIB}, "podTemplate": {}}
RECOVERED_AT = "2026-01-01T00:09:00Z"  # 60 s before test_config_plan.NOW


def out_of_space(
    volume="128Mi",
    capacity=SMALL,
    request=None,
    running=SMALL_CONFIG,
    config=SMALL_CONFIG,
    live=60 * MIB,
    policy="256Mi",
    expandable=True,
    quota_set=False,
    quota_policy=None,
):
    """Three members on volumes of ``capacity`` running ``running``; the cluster asks for
    ``volume`` and ``config``; NOSPACE raised again 60 s after a recovery that left ``live``
    bytes in each database."""
    running_hash = config_hash(running)
    observed = cluster(configs=(running_hash,) * 3)
    observed["config"] = config
    observed["volume_size"] = volume
    observed["quota_set"] = quota_set
    limits = {"maxVolumeSize": policy, "maxQuotaBackendBytes": quota_policy}
    observed["maintenance"] = {"spaceRecovery": {k: v for k, v in limits.items() if v}}
    for i, peer in enumerate(observed["peers"]):
        peer["quota_bytes"] = running["options"]["quotaBackendBytes"]
        size = request or capacity
        observed["pvcs"][peer["name"]] = {
            **claim(size, capacity, expandable=expandable),
            "uid": f"uid-{i}",
            "capacity": bytes_quantity(capacity),
        }
    observed["etcd"]["alarms"] = [{"member_id": f"{0:016x}", "alarm": "NOSPACE"}]
    for member in observed["etcd"]["members"]:
        member["db_size_in_use"] = live
    observed["current"] = {
        "maintenance": {
            "lastDefragmentation": {
                "at": RECOVERED_AT,
                "reason": "NOSPACE",
                "members": [
                    {"name": f"c-{i}", "dbSizeBefore": live, "dbSizeAfter": live} for i in range(3)
                ],
            }
        }
    }
    return observed


def test_live_data_that_fills_the_quota_grows_every_volume_in_place_doubled():
    step = plan(out_of_space())
    assert (step["action"], step["reason"]) == ("grow_volumes", "GrowingVolumesForSpace")
    assert step["members"] == [{"name": f"c-{i}"} for i in range(3)]
    assert step["space_recovery"] == {"volumeSize": "256Mi", "grownFrom": "128Mi"}
    assert "60 MiB in use" in step["message"] and "from 128Mi to 256Mi" in step["message"]
    # Doubled, but never past the limit.
    step = plan(out_of_space(policy="200Mi"))
    assert step["space_recovery"]["volumeSize"] == "200Mi"


def test_the_grown_volumes_are_waited_for_before_the_larger_quota():
    step = plan(out_of_space(volume="256Mi", request=LARGE, capacity=SMALL, config=LARGE_CONFIG))
    assert (step["action"], step["reason"], step["requeue"]) == ("wait", "VolumesGrowing", "poll")
    assert "waiting for the volumes to grow to 256Mi" in step["message"]


def test_the_larger_quota_is_rolled_out_with_the_alarm_still_raised():
    observed = out_of_space(volume="256Mi", capacity=LARGE, config=LARGE_CONFIG)
    step = plan(observed)
    assert (step["action"], step["reason"]) == ("restart_member", "RollingRestart")
    assert step["config"] == LARGE_CONFIG and step["peer"] == "c-2"
    assert "restarting onto the larger quota" in step["message"]
    # Without the policy the alarm holds every restart: the space comes back first.
    observed["maintenance"] = {}
    assert plan(observed)["action"] == "wait"


def test_with_the_larger_quota_the_space_is_given_back_and_the_alarm_disarmed():
    step = plan(out_of_space(volume="256Mi", capacity=LARGE, running=LARGE_CONFIG))
    assert (step["action"], step["reason"]) == ("defragment", "DatabaseQuotaExceeded")
    assert step["maintenance"]["disarm"] is True


def test_live_data_that_fills_the_larger_quota_too_grows_again_up_to_the_limit():
    observed = out_of_space(
        volume="256Mi", capacity=LARGE, running=LARGE_CONFIG, live=120 * MIB, policy="1Gi"
    )
    step = plan(observed)
    assert step["space_recovery"] == {"volumeSize": "512Mi", "grownFrom": "256Mi"}
    observed["maintenance"] = {"spaceRecovery": {"maxVolumeSize": "256Mi"}}
    step = plan(observed)
    assert (step["action"], step["reason"]) == ("wait", "DatabaseQuotaExceeded")
    assert "have spec.maintenance.spaceRecovery.maxVolumeSize (256Mi) already" in step["message"]


def test_without_the_policy_or_where_it_cannot_help_the_cluster_waits_and_says_why():
    cases = {
        "": "let the operator grow it (spec.maintenance.spaceRecovery.maxVolumeSize), rolled",
        "quota_set": "maxQuotaBackendBytes lets the operator raise it",
        "fixed": "the StorageClass of c-0, c-1, c-2 does not allow expansion",
    }
    for case, said in cases.items():
        step = plan(
            out_of_space(
                policy="" if case == "" else "256Mi",
                quota_set=case == "quota_set",
                expandable=case != "fixed",
            )
        )
        assert (step["action"], step["reason"], step["requeue"]) == (
            "wait",
            "DatabaseQuotaExceeded",
            "degraded",
        ), case
        assert said in step["message"], (case, step["message"])


def test_a_quota_set_by_hand_is_raised_within_the_volume_when_the_policy_allows():
    # 64 MiB set on 512Mi volumes, which leave room for a 256 MiB quota: doubled to 128 MiB.
    set_by_hand = dict(volume="512Mi", capacity=512 * MIB, quota_set=True, policy=None)
    step = plan(out_of_space(**set_by_hand, quota_policy="1Gi"))
    assert (step["action"], step["reason"], step["peer"]) == (
        "restart_member",
        "RaisingQuotaForSpace",
        "c-2",
    )
    assert step["config"] == LARGE_CONFIG
    assert step["space_recovery"] == {"quotaBackendBytes": 128 * MIB, "raisedFrom": 64 * MIB}
    assert "raising the quota from 64 MiB to 128 MiB" in step["message"]
    # The next rounds read the raised quota as the spec's, and roll the other members onto it.
    step = plan(out_of_space(**set_by_hand, config=LARGE_CONFIG, quota_policy="1Gi"))
    assert (step["action"], step["config"]) == ("restart_member", LARGE_CONFIG)
    assert "space_recovery" not in step
    # Never past the limit.
    step = plan(out_of_space(**set_by_hand, quota_policy="100Mi"))
    assert step["space_recovery"]["quotaBackendBytes"] == 100 * MIB


def test_a_quota_that_cannot_be_raised_says_why_or_grows_the_volumes_first():
    # 64 MiB is the most 128Mi volumes leave room for.
    at_most = dict(quota_set=True, quota_policy="1Gi")
    step = plan(out_of_space(**at_most, policy=None))
    assert (step["action"], step["reason"]) == ("wait", "DatabaseQuotaExceeded")
    assert "is the most the 128Mi volumes leave room for" in step["message"]
    step = plan(out_of_space(**at_most, policy="256Mi"))
    assert (step["action"], step["space_recovery"]) == (
        "grow_volumes",
        {"volumeSize": "256Mi", "grownFrom": "128Mi"},
    )
    said = {
        "64Mi": "the quota is at spec.maintenance.spaceRecovery.maxQuotaBackendBytes (64Mi)",
        None: "maxQuotaBackendBytes lets the operator raise it",
    }
    for limit, message in said.items():
        step = plan(
            out_of_space(volume="512Mi", capacity=512 * MIB, quota_set=True, quota_policy=limit)
        )
        assert step["action"] == "wait" and message in step["message"], step["message"]
    # A quota derived from the volume is the most it leaves room for already.
    step = plan(out_of_space(policy=None, quota_policy="1Gi"))
    assert "the quota derived from the volumes grows with them" in step["message"]


def spec(size="128Mi", **more):
    return {
        "version": "3.6.16",
        "storage": {"volumeClaimTemplate": {"resources": {"requests": {"storage": size}}}},
        **more,
    }


def test_the_spec_is_read_with_the_size_the_volumes_were_grown_to():
    grown = {"maintenance": {"spaceRecovery": {"volumeSize": "256Mi", "grownFrom": "128Mi"}}}
    original = spec()
    seen = grown_spec(original, grown)
    assert seen["storage"]["volumeClaimTemplate"]["resources"]["requests"]["storage"] == "256Mi"
    assert effective_options(seen)["quotaBackendBytes"] == 128 * MIB
    assert original == spec(), "the spec ansible-operator passed is not changed"
    # Nothing grown, a spec asking for more since, or no storage at all: the spec as it is.
    for status in ({}, None, {"maintenance": {}}):
        assert grown_spec(original, status) is original
    larger = spec("1Gi")
    assert grown_spec(larger, grown) is larger
    ephemeral = {"version": "3.6.16"}
    assert grown_spec(ephemeral, grown) is ephemeral


def test_the_spec_is_read_with_the_quota_raised_while_the_limit_allows_it():
    raised = {"maintenance": {"spaceRecovery": {"quotaBackendBytes": 128 * MIB}}}
    limit = {"spaceRecovery": {"maxQuotaBackendBytes": "1Gi"}}
    original = spec("512Mi", options={"quotaBackendBytes": "64Mi"}, maintenance=limit)
    assert effective_options(grown_spec(original, raised))["quotaBackendBytes"] == 128 * MIB
    # A spec asking for more since, a limit lowered below it or removed, a quota derived from
    # the volume: the spec as it is.
    unchanged = (
        spec("512Mi", options={"quotaBackendBytes": "200Mi"}, maintenance=limit),
        spec(
            "512Mi",
            options={"quotaBackendBytes": "64Mi"},
            maintenance={"spaceRecovery": {"maxQuotaBackendBytes": "100Mi"}},
        ),
        spec("512Mi", options={"quotaBackendBytes": "64Mi"}),
        spec("512Mi", maintenance=limit),
    )
    for asked in unchanged:
        assert grown_spec(asked, raised) is asked


def test_sizes_are_written_as_the_shortest_exact_quantity():
    assert [bytes_quantity(n) for n in (256 * MIB, 2 << 30, 1536 * MIB, 1000, 0)] == [
        "256Mi",
        "2Gi",
        "1536Mi",
        "1000",
        "0",
    ]
