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

# Where Ansible finds our roles, modules, module_utils and filters (HOME is /opt/ansible).
ENV ANSIBLE_ROLES_PATH=/opt/ansible/roles \
    ANSIBLE_LIBRARY=/opt/ansible/library \
    ANSIBLE_MODULE_UTILS=/opt/ansible/plugins/module_utils \
    ANSIBLE_FILTER_PLUGINS=/opt/ansible/plugins/filter \
    ANSIBLE_ACTION_PLUGINS=/opt/ansible/plugins/action \
    ETCD_REPOSITORY=quay.io/coreos/etcd

COPY watches.yaml ${HOME}/watches.yaml
COPY playbooks/ ${HOME}/playbooks/
COPY roles/ ${HOME}/roles/
COPY library/ ${HOME}/library/
COPY plugins/ ${HOME}/plugins/
