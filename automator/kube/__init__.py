"""Kubernetes adapters: the only code of the automator that imports the `kubernetes` client.

client: the ApiClient, error mapping, timeouts and paging shared by the others; adapter: the reclaim
automator's reads (records for the planner) and writes (Evictions, annotations, Events), and the public
list methods the KEDA cache (automator/keda/kube.py) uses; leader: Lease-based leader election; dra: the
DRA capacity check's reads and Events.
"""

from automator.kube.adapter import DISRUPTION_BUDGET_CAUSE, KubernetesAdapter, is_pdb_refusal
from automator.kube.client import ACTIVE_PODS, PAGE_SIZE, api_client
from automator.kube.dra import DRA_GROUP_VERSION, DraKubernetesAdapter
from automator.kube.leader import LeaderElector

__all__ = [
    "ACTIVE_PODS",
    "DISRUPTION_BUDGET_CAUSE",
    "DRA_GROUP_VERSION",
    "PAGE_SIZE",
    "DraKubernetesAdapter",
    "KubernetesAdapter",
    "LeaderElector",
    "api_client",
    "is_pdb_refusal",
]
