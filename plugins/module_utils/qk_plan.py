# Copyright: quorumkeeper contributors
# SPDX-License-Identifier: Apache-2.0
"""Decide the next step for an EtcdCluster: ``etcd_cluster_plan`` and its ordered RULES.

The etcdcluster role observes (etcd_cluster_observe: EtcdPeers, their pods and claims, the
Services, etcd's member list and health), asks ``etcd_cluster_plan`` for one step, performs it,
and writes what ``etcd_cluster_report`` (qk_report) says. One step per reconcile keeps every
membership change quorum-safe and makes the operator restart-safe: whatever it was doing when it
was killed, the next reconcile re-observes and picks the step again.

The planner is a pure function of the observation: the rules read a private copy of it
(qk_plan_step.PlanContext) and return a Step or None; the first rule, in the order of RULES,
that returns a step decides. Rules, in priority order (the action they return in brackets):

- repair_members [repair_members]: peers whose ReplicaSet is gone (deleted by hand, or an
  interrupted reconcile): recreate it; the member's data is untouched.
- recovery_under_way [hand_over_members, force_new_cluster, finish_force_new_cluster, wait]: a
  disaster recovery (see quorum_lost) started earlier: finish it before anything else.
- rolling_upgrade [upgrade_member, wait] (a change of spec.version, qk_plan_upgrade): a member
  restarted on the new version is waited for (or the upgrade stops at it: UpgradeFailed) before
  anything else; the next member is upgraded only when every member is healthy, caught up,
  without alarm, and no other change is due (a scale or replacement goes first, on the version
  the members run).
- roll_config [restart_member, wait] (a change of spec.options or spec.podTemplate,
  qk_plan_config): the same rollout through the same gate (qk_plan_rollout) once no upgrade is
  under way: a member restarted onto the new configuration is waited for (or the rollout stops
  at it: ConfigRolloutFailed), an out-of-date member that is down is restarted at once, the
  others one at a time, the leader last. Held while a volume is smaller than spec.storage asks
  (grow_volumes).

No member answers:
- data_lost_unanswered [wait, force_new_cluster, restore_from_backup]: members of the formed
  cluster lost their data: they count as lost even when none answers, and without a quorum of
  survivors waiting cannot help (the quorum diagnosis below; a formed cluster is never
  bootstrapped again).
- update_peers [update_peers]: a cluster that never formed because its pods cannot pull their
  image, whose version or repository was corrected since: point its peers at the corrected
  image.
- bootstrap [bootstrap, wait]: the peers (if any) all belong to the initial bootstrap: create the
  missing initial peers with the same static initial cluster, then wait for them to form a
  quorum.
- cluster_unreachable [wait]: a formed cluster of which no member answers: no change is made
  without a quorum.

etcd answers:
- create_peer [create_peer]: etcd has a member (a learner we added) with no EtcdPeer: the
  operator was interrupted between adding the member and creating its peer.
- quorum_lost [wait, force_new_cluster, restore_from_backup] (qk_plan_recovery): no healthy
  quorum. The message says whether waiting helps (members down, data intact) or not (a majority
  lost its data: which member still holds data, and the backup to restore from). Automatic
  disaster recovery (spec.disasterRecovery, opt-in) acts only when a majority of the voting
  members lost its data (their PVCs are gone) so that the others can never form a quorum, and
  only after that lasted delaySeconds. With a survivor: the one with the highest raft index
  restarts with --force-new-cluster (``finish_force_new_cluster`` restarts it without the flag
  once it runs alone), then the ordinary steps replace the others. Without: an in-place
  EtcdRestore of the newest verified backup, to which ``hand_over_members`` gives the cluster
  (its data-less peers are deleted); the bootstrap step then starts the members on the restored
  volumes.

With a healthy quorum (the rules below return None without one):
- replace_member [replace_member, wait]: a peer whose data is gone (its claim was lost) or whose
  member was removed from etcd behind our back: remove the member (if still listed) and the
  peer; it is re-added. Waits (ReplacementUnsafe) when the removal would lose the quorum.
- unhealthy_members [wait]: nothing changes while a voting member is unhealthy.
- promote [promote, wait]: a started learner: promote it once it has caught up (a learner still
  starting is waited for while a scale or move needs it; else remove_member removes it).
- grow_volumes [grow_volumes] (qk_plan_volumes): spec.storage asks for larger volumes: raise
  every member claim whose StorageClass allows expansion (roll_config holds the larger default
  quota until the volumes have grown); a class that cannot expand is left to
  move_to_new_volumes. Before recover_space: a larger volume
  (and its quota) is what a database whose live data fills the quota needs.
- recover_space [defragment, grow_volumes, restart_member, wait] (qk_plan_space): etcd raised
  NOSPACE and refuses writes: compact, defragment member by member (the leader last,
  leadership moved first) and disarm, before any membership change; when the alarm is back
  soon after, the live data is at the quota: as spec.maintenance.spaceRecovery allows, a
  quota set by hand is raised within the volume (maxQuotaBackendBytes) or the volumes grow in
  place (maxVolumeSize), and the members are restarted onto the larger quota with the alarm
  raised (make_room), else the step waits (DatabaseQuotaExceeded) saying what a person can do.
- add_member [add_member]: fewer voting members than spec.replicas: add the lowest free
  ordinals one at a time, each as a learner, started and promoted when it has caught up before
  the next (etcd allows one learner; each add and promotion checks etcd's quorum again).
- remove_member [remove_member]: more members than spec.replicas: remove a learner no longer
  needed (RemovingLearner), else a member moving to a new volume (its replacement has
  joined), else the highest ordinals, one at a time in one step (leader moved first; each
  removal checks etcd's quorum again).
- replace_stale_peer [replace_member]: a peer that never became a member (its learner was
  removed before it started): recreate it.
- move_to_new_volumes [add_member, wait] (qk_plan_volumes): a member on a volume of another
  StorageClass than spec.storage names, or smaller than it asks of a class that cannot expand:
  add a member on a claim spec.storage describes (promoted once caught up); remove_member then
  removes the old one and its claim.
  One member at a time through the rollout gate, followers first, the leader last; never fewer
  voting members than spec.replicas.
- wait_for_volumes [wait] (qk_plan_volumes): a claim asked to grow has not yet: wait, saying
  what the claims report (a resize that never ends holds only the quota and defragmentation).
- defragment [defragment, wait] (qk_plan_space): spec.maintenance.defragmentation, once nothing
  else is to be done: a request (annotation etcd.quorumkeeper.dev/defragment set to a new
  value) or a scheduled time defragments every member, a threshold (free pages, quota use) the
  members over it; one at a time through the rollout gate, the leader last.
- cluster_ready [none]: the cluster matches its spec (the next scheduled defragmentation, when
  sooner than the steady period, is its countdown).

A step whose result shows only later (pods starting) says ``observe_after: False``: observing
right after it would only cost time; one that finishes a change by starting members names them
in ``wait_ready``, and the observation after it waits a few seconds for their pods to be ready
(the change is then reported done in this reconcile). Every step says when the next reconcile
should come
(``requeue``): ``next`` (a following step can be taken at once), ``event`` (a watched change
will come: a pod becoming ready; the period is only a fallback), ``poll`` (something no event
announces, etcd answering, is checked soon), ``degraded`` (waiting for something outside the
operator), ``steady``, or a countdown (``"42s"``).
"""

from __future__ import annotations

from collections.abc import Mapping

from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_plan_config import roll_config
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_plan_membership import (
    add_member,
    bootstrap,
    cluster_ready,
    create_peer,
    promote,
    remove_member,
    repair_members,
    replace_member,
    replace_stale_peer,
    unhealthy_members,
    update_peers,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_plan_recovery import (
    cluster_unreachable,
    data_lost_unanswered,
    quorum_lost,
    recovery_under_way,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_plan_space import (
    defragment,
    recover_space,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_plan_step import (
    PlanContext,
    Rule,
    Step,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_plan_upgrade import (
    rolling_upgrade,
)
from ansible_collections.quorumkeeper.etcd.plugins.module_utils.qk_plan_volumes import (
    grow_volumes,
    move_to_new_volumes,
    wait_for_volumes,
)

# The order is the priority (see the module doc); cluster_ready always decides.
RULES: tuple[Rule, ...] = (
    repair_members,
    recovery_under_way,
    rolling_upgrade,
    roll_config,
    # No member answers.
    data_lost_unanswered,
    update_peers,
    bootstrap,
    cluster_unreachable,
    # etcd answers.
    create_peer,
    quorum_lost,
    # A healthy quorum.
    replace_member,
    unhealthy_members,
    promote,
    grow_volumes,
    recover_space,
    add_member,
    remove_member,
    replace_stale_peer,
    move_to_new_volumes,
    wait_for_volumes,
    defragment,
    cluster_ready,
)


def etcd_cluster_plan(observed: Mapping) -> Step:
    """The next step. observed: etcd_cluster_observe's result {cluster, peers, pvcs, pods,
    replicasets, etcd, backups, recovery_restore} with the role's context {replicas, version,
    repository, config, upgrade, disaster_recovery, current, now}; it is not modified."""
    context = PlanContext.from_observed(observed)
    for rule in RULES:
        step = rule(context)
        if step is not None:
            return step
    raise AssertionError("cluster_ready, the last rule, always decides")
