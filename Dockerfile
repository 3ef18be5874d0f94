# The quorumkeeper operator image: the ansible-operator base image plus our roles, modules
# and Python dependencies.
#   docker build -t quay.io/quorumkeeper/etcd-operator:0.1.0 .
FROM quay.io/operator-framework/ansible-operator:v1.42.2

# Python packages: the same pinned set the local cluster and the tests use (ansible,
# kubernetes client, ...) plus our modules' dependencies (etcd3aio, boto3,
# google-cloud-storage). The base image's Python is system-wide, so install as root.
USER root
COPY requirements.txt ${HOME}/requirements.txt
RUN python3 -m pip install --no-cache-dir -r ${HOME}/requirements.txt
USER 1001

COPY requirements.yml ${HOME}/requirements.yml
RUN ansible-galaxy collection install -r ${HOME}/requirements.yml \
 && chmod -R ug+rwx ${HOME}/.ansible

# Where Ansible finds our roles, modules and plugins: ansible.cfg (HOME is /opt/ansible).
ENV ANSIBLE_CONFIG=/opt/ansible/ansible.cfg \
    ETCD_REPOSITORY=quay.io/coreos/etcd

COPY watches.yaml ${HOME}/watches.yaml
COPY ansible.cfg ${HOME}/ansible.cfg
COPY playbooks/ ${HOME}/playbooks/
COPY roles/ ${HOME}/roles/
COPY library/ ${HOME}/library/
COPY plugins/ ${HOME}/plugins/
COPY collections/ ${HOME}/collections/
# The alert rules, where roles/etcdcluster/files/alert-rules.yaml links to (spec.monitoring's
# PrometheusRule carries them).
COPY config/prometheus/rules.yaml ${HOME}/config/prometheus/rules.yaml
# bin/ansible-runner first on the PATH and bin/module-python the modules' interpreter:
# ansible-operator's runs and their modules start warm (plugins/module_utils/qk_warm_start.py,
# docs/reconcile-cost.md).
COPY bin/ ${HOME}/bin/
ENV PATH=${HOME}/bin:${PATH} \
    QK_MODULE_PYTHON=${HOME}/bin/module-python
