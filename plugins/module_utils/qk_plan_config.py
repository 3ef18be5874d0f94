# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0
"""The EtcdCluster planner's rolling restart onto a new configuration: a change of
spec.options, spec.podTemplate or spec.tls (the rule ``roll_config``, see its doc).

What a member is configured with is its EtcdPeer's peer_config (qk_options: its etcd options
and pod template, its TLS); what its pod runs is the hash the pod was started with (annotation
CONFIG_HASH_ANNOTATION); what it was last seen serving with is its EtcdPeer's
status.configHash, written by the report while the member is healthy.
"""

from __future__ import annotations

from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_cluster_tls import (
    LISTEN_PLAIN_HTTP,
    SERVE_PLAIN_HTTP,
    schemes,
    served_client_schemes,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_domain import (
    ordinal_of,
    seconds_between,
    version_or_none,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_options import config_hash
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_plan_rollout import (
    membership_changing,
    next_to_restart,
    restart_gate,
    space_recovery_first,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_plan_step import (
    PlanContext,
    Step,
    make_step,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_plan_upgrade import (
    DEFAULT_UPGRADE_MEMBER_TIMEOUT_SECONDS,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_plan_volumes import (
    volumes_changing,
)

# What a member's configuration is made from, for the messages.
CONFIG_FIELDS = "spec.options, spec.podTemplate and spec.tls"


def roll_config(ctx: PlanContext, for_space: bool = False) -> Step | None:
    """The step of a rolling restart onto the cluster's configuration, or None when it has
    nothing to do now.

    A member is out of date when its EtcdPeer asks for another configuration than the
    cluster's, or its pod was started with another one than its EtcdPeer asks for (an
    operator stopped between the two). Each is restarted in turn, as the upgrade does it and
    through the same gate (qk_plan_rollout): followers by highest ordinal first, the leader
    last after handing leadership to a member already restarted; its EtcdPeer takes the new
    configuration and its pod is replaced on the same volume, with the same name and member ID.

    A member restarted onto the new configuration that has not served with it yet is waited
    for before anything else, up to spec.upgrade.memberTimeoutSeconds; then the rollout stops
    at it (ConfigRolloutFailed) and the others keep serving; so is one restarted onto a stage
    of a TLS change that moved on to its next stage meanwhile. A member that is down and out of
    date (spec.options put back after a value its etcd refused) is restarted at once when every
    other member is healthy: it serves nothing as it is. Not started while an upgrade or
    another change (scale, replacement, learner, recovery) is under way.

    ``for_space``: the rollout is the cure of a NOSPACE alarm (the larger quota of volumes the
    operator grew: qk_plan_space.recover_space), so the alarm does not hold it.
    """
    final = ctx.observed.get("config")
    peers = ctx.live_peers
    if not final or not peers or not ctx.reachable or any(ctx.lost_data(n) for n in peers):
        return None
    wanted = staged_config(ctx, final)
    wanted_hash = config_hash(wanted)
    members = ctx.by_peer
    stale, returning = [], []
    for name, peer in sorted(peers.items(), key=lambda item: -ordinal_of(item[0])):
        member = members.get(name)
        if member is None or member.get("is_learner"):
            # Not a voting member (yet): scale-up, replacement and promotion deal with it.
            continue
        pod_hash = (ctx.pods.get(name) or {}).get("config_hash")
        restarted = not member.get("healthy") and _restarted_for_config(peer, pod_hash)
        if peer.get("config_hash") == wanted_hash and pod_hash in (None, wanted_hash):
            if restarted:
                returning.append(name)
        elif restarted and _on_a_stage_toward(peer, final):
            # Restarted onto an earlier stage of this TLS change (the stage moved on when its
            # EtcdPeer took it) and not back yet: restarting it again now would skip the wait
            # that tells whether it serves with that stage at all.
            returning.append(name)
        else:
            stale.append(name)
    total = len(peers)
    count = f"{total - len(stale) - len(returning)} of {total} members up to date"
    if returning and (ctx.etcd.get("healthy") or total == 1):
        return _wait_for(ctx, returning[0], count)
    if not stale or _upgrade_under_way(ctx) or membership_changing(ctx) or volumes_changing(ctx):
        # A quota derived from a volume that has not grown yet would not fit its disk, and a
        # member about to move to a new volume starts there with the new configuration.
        return None
    down = [n for n in stale if not members[n].get("healthy")]
    if down:
        return _restart_down_member(ctx, down[0], final, wanted, count)
    if not ctx.etcd.get("healthy") or (space_recovery_first(ctx) and not for_space):
        return None
    waiting = restart_gate(
        ctx,
        f"restarting members onto their new configuration ({count})",
        "RollingRestart",
        ("NOSPACE",) if for_space else (),
    )
    if waiting:
        return waiting
    name, move_to = next_to_restart(
        ctx,
        stale,
        lambda n, m: n not in stale and (ctx.pods.get(n) or {}).get("config_hash") == wanted_hash,
    )
    if move_to is None:
        return make_step(
            "wait",
            "RollingRestart",
            f"restarting members onto their new configuration ({count}): waiting for a "
            f"restarted member to hand leadership of {name} to",
            "poll",
        )
    then = f"; leadership moves to {move_to} first" if move_to else ""
    return _restart_step(
        ctx,
        name,
        wanted,
        f"restarting member {name} onto the new configuration of {CONFIG_FIELDS}"
        f"{_stage_note(ctx, name, final, wanted)} ({count}){then}",
        move_to,
    )


def staged_config(ctx: PlanContext, final: dict) -> dict:
    """The configuration members are restarted onto now, on the way to ``final``.

    Turning client TLS on or off takes two rolling restarts. ``final`` is restarted onto at
    once only when every member already serves the schemes it will serve, so that a client of
    the new scheme (the operator first) reaches every member throughout. Until then each member
    is first restarted onto a bridge: TLS with the certificates of whichever side has them, and
    plain HTTP on the same port (SERVE_PLAIN_HTTP). Clients of either scheme work on every
    member that has taken it, and no member changes from one scheme straight to the other.

    Turning peer TLS on takes two as well: first every member gets the peer certificate while
    it still serves its peers plain HTTP (LISTEN_PLAIN_HTTP), so that every member can reach a
    peer that serves TLS; only then does each move to TLS. etcd's leader sends a snapshot over a
    connection it opens itself, so a leader that could not reach a TLS member could never bring
    one back that fell behind, nor a new member. Turning it off takes one: a member with the
    certificate reaches plain peers too, and the leader is the last to lose it.
    """
    final_tls = final.get("tls") or {}
    current = [peer.get("tls") or {} for peer in ctx.live_peers.values()]
    tls = dict(final_tls)
    serves = served_client_schemes(final_tls)
    if not all(serves <= served_client_schemes(t) for t in current):
        bridge = final_tls.get("client") or next(t["client"] for t in current if t.get("client"))
        tls["client"] = {**bridge, SERVE_PLAIN_HTTP: True}
    if final_tls.get("peer") and not all(t.get("peer") for t in current):
        tls["peer"] = {**final_tls["peer"], LISTEN_PLAIN_HTTP: True}
    return final if tls == final_tls else {**final, "tls": tls}


def new_member_peer_scheme(ctx: PlanContext) -> str | None:
    """The scheme "http" when a member added now must still serve its peers plain HTTP although the
    cluster asks for peer TLS: some member could not reach it over TLS yet (staged_config);
    None when it starts as the cluster's spec says."""
    final_tls = (ctx.observed.get("config") or {}).get("tls") or {}
    if final_tls.get("peer") and not all(
        (peer.get("tls") or {}).get("peer") for peer in ctx.live_peers.values()
    ):
        return "http"
    return None


def _stage_note(ctx: PlanContext, name: str, final: dict, wanted: dict) -> str:
    """What this restart changes beyond the configuration, for its Event: the stage of a TLS
    change, the peer URLs etcd lists the member with moving to another scheme, a new CA."""
    running = (ctx.live_peers.get(name) or {}).get("tls") or {}
    target = wanted.get("tls") or {}
    notes = []
    if SERVE_PLAIN_HTTP in (target.get("client") or {}):
        turning = "on" if (final.get("tls") or {}).get("client") else "off"
        notes.append(
            f", first serving https and http side by side (client TLS is turned {turning} in "
            "two rolling restarts)"
        )
    if LISTEN_PLAIN_HTTP in (target.get("peer") or {}):
        notes.append(
            ", first with the peer certificate while still serving peers plain HTTP (peer TLS "
            "is turned on in two rolling restarts)"
        )
    # From the URLs etcd lists, not the EtcdPeer's configuration: a restart planned again (its
    # pod not replaced yet, or the member down) still moves them.
    if peer_urls_in_scheme(ctx.by_peer.get(name), wanted):
        target_scheme = schemes(target)["peer_scheme"]
        turning = "on" if target_scheme == "https" else "off"
        notes.append(f", its peer URLs moved to {target_scheme} (peer TLS is turned {turning})")
    if notes:
        return "".join(notes)
    if any(
        (running.get(part) or {}).get("trust") != (target.get(part) or {}).get("trust")
        for part in ("client", "peer")
    ):
        return ", to load a new CA bundle (a CA rotation, or a new ca.crt in your own Secret)"
    return ""


def _restarted_for_config(peer: dict, pod_hash: str | None) -> bool:
    """Whether the member's pod was started with its EtcdPeer's configuration, with which it
    has never been seen serving: the rolling restart replaced it and it is not back yet."""
    seen = (peer.get("status") or {}).get("configHash")
    return bool(seen) and pod_hash == peer.get("config_hash") and seen != pod_hash


def _on_a_stage_toward(peer: dict, final: dict) -> bool:
    """Whether the member's EtcdPeer asks for a configuration staged_config gives on the way to
    ``final``: its options and pod template, with the bridge of client TLS (plain HTTP served
    beside TLS, on the way on or off) or of peer TLS (the certificate, peers still served plain
    HTTP, on the way on only). Peer TLS turned off again, or other options, are another change
    than the one the member was restarted for, not a stage of it."""
    final_tls, peer_tls = final.get("tls") or {}, peer.get("tls") or {}
    if set(peer_tls) - {"client", "peer"}:
        return False
    client, final_client = peer_tls.get("client"), final_tls.get("client")
    if client != final_client and not (
        client
        and client.get(SERVE_PLAIN_HTTP)
        and (final_client is None or final_client == _without(client, SERVE_PLAIN_HTTP))
    ):
        return False
    peer_part, final_peer = peer_tls.get("peer"), final_tls.get("peer")
    if peer_part != final_peer and not (
        final_peer and peer_part == {**final_peer, LISTEN_PLAIN_HTTP: True}
    ):
        return False
    config = {key: value for key, value in final.items() if key != "tls"}
    if peer_tls:
        config["tls"] = peer_tls
    return config_hash(config) == peer.get("config_hash")


def _without(settings: dict, key: str) -> dict:
    return {k: v for k, v in settings.items() if k != key}


def _upgrade_under_way(ctx: PlanContext) -> bool:
    """Whether a member's EtcdPeer or etcd names another version than spec.version: the
    upgrade goes first (each of its restarts is one a configuration change would repeat)."""
    target = str(ctx.observed.get("version") or "")
    if not version_or_none(target):
        return False
    return any(
        peer.get("version") != target
        or (ctx.by_peer.get(name) or {}).get("version") not in (None, "", target)
        for name, peer in ctx.live_peers.items()
    )


def _wait_for(ctx: PlanContext, name: str, count: str) -> Step:
    pod = ctx.pods.get(name) or {}
    since = pod.get("created")
    elapsed = seconds_between(since, ctx.observed.get("now") or None) if since else 0.0
    settings = ctx.observed.get("upgrade") or {}
    timeout = int(settings.get("memberTimeoutSeconds") or DEFAULT_UPGRADE_MEMBER_TIMEOUT_SECONDS)
    problem = pod.get("problem")
    if not problem and elapsed <= timeout:
        return make_step(
            "wait",
            "RollingRestart",
            f"restarting members onto their new configuration ({count}): waiting for {name} "
            f"to come back (restarted {int(elapsed)}s ago)",
            "poll",
        )
    why = (
        problem["message"]
        if problem
        else f"it is not healthy {int(elapsed)}s after its restart (spec.upgrade."
        f"memberTimeoutSeconds is {timeout}); see kubectl logs {pod.get('name') or name}"
    )
    return make_step(
        "wait",
        "ConfigRolloutFailed",
        f"the rolling restart onto the new configuration stopped at member {name} ({count}): "
        f"{why}; the other members keep serving and are not touched. Put spec.options and "
        f"spec.podTemplate (or spec.tls) back to what they were to restart {name} with "
        "them at once",
        "degraded",
    )


def _restart_down_member(
    ctx: PlanContext, name: str, final: dict, wanted: dict, count: str
) -> Step | None:
    """An out-of-date member that is down: restarting it costs nothing when every other member
    is healthy; else the wait for members is reported as usual."""
    others = [m for n, m in ctx.by_peer.items() if n != name and not m.get("is_learner")]
    if not all(m.get("healthy") for m in others) or (
        len(ctx.live_peers) > 1 and not ctx.etcd.get("healthy")
    ):
        return None
    return _restart_step(
        ctx,
        name,
        wanted,
        f"restarting member {name}, which is down, onto the configuration of {CONFIG_FIELDS}"
        f"{_stage_note(ctx, name, final, wanted)} ({count})",
        "",
    )


def _restart_step(ctx: PlanContext, name: str, wanted: dict, message: str, move_to: str) -> Step:
    member = ctx.by_peer.get(name)
    moved = peer_urls_in_scheme(member, wanted)
    return make_step(
        "restart_member",
        "RollingRestart",
        message,
        "next",
        peer=name,
        member=member,
        config=wanted,
        move_leader_to=move_to,
        **({"peer_urls": moved} if moved else {}),
    )


def peer_urls_in_scheme(member: dict | None, config: dict) -> list[str] | None:
    """The member's peer URLs with the scheme ``config`` serves peers with, when it is not the
    one etcd lists them with; None when they are right.

    A member changes scheme on the same port: its peer URLs are changed just before it restarts
    with the other one. Members of either scheme keep talking, because one that has the peer
    certificate dials both kinds (TLS to https peers, plain HTTP to the others), and etcd sends
    raft messages over connections either side opened; checked on etcd 3.4, 3.5 and 3.6 under
    a writer, no write lost.
    """
    scheme = schemes(config.get("tls"))["peer_scheme"]
    urls = (member or {}).get("peer_urls") or []
    moved = [f"{scheme}://{url.split('://', 1)[-1]}" for url in urls]
    return moved if moved != urls else None
