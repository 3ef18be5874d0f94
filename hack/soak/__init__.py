"""The chaos soak: faults against an EtcdCluster while clients record a history that is then
checked for linearizability (hack/soak/checker, porcupine) and read back.

- history: the recorded operations, how an error is classified, the checker's verdict.
- workload: concurrent etcd clients (etcd3aio's gRPC stubs) through the client Service.
- chaos: the fault kinds, the rounds, recovery, the report.

The CLI is hack/soak.py; the short soak is tests/e2e/test_soak.py.
"""
