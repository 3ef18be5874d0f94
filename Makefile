# quorumkeeper: an etcd operator for Kubernetes, built the Operator SDK Ansible way.
# `make help` lists the targets. Everything is installed by `make toolchain` into $(QK_CACHE).

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

VERSION ?= 0.1.0
IMG ?= quay.io/quorumkeeper/etcd-operator:$(VERSION)
export QK_CACHE ?= $(HOME)/.cache/quorumkeeper
export QK_STATE ?= /var/lib/quorumkeeper
VENV := $(QK_CACHE)/venv
PYTHON := $(VENV)/bin/python
LOCALCLUSTER := $(PYTHON) hack/cluster/localcluster.py
KUBECTL = $(shell python3 -c 'import json;print(json.load(open("$(QK_CACHE)/toolchain.json"))["kubernetes"])' 2>/dev/null)/kubectl
# Targets that talk to a cluster use $KUBECONFIG when set, else the local cluster's.
export KUBECONFIG ?= $(QK_STATE)/kubeconfig
SAMPLE ?= config/samples/etcd_v1alpha1_etcdcluster.yaml
PYTEST_ARGS ?=

##@ Main commands

.PHONY: demo
demo: cluster-up deploy ## Local cluster + operator + the sample 3-member EtcdCluster, shown healthy
	$(KUBECTL) apply -f $(SAMPLE)
	$(KUBECTL) wait etcdclusters.etcd.quorumkeeper.dev/my-cluster --for=condition=Available --timeout=300s
	$(KUBECTL) get etcdclusters.etcd.quorumkeeper.dev,etcdpeers.etcd.quorumkeeper.dev,pods,pvc -o wide
	@echo; echo "export KUBECONFIG=$(KUBECONFIG)   # then: kubectl get etcdc (or: kubectl get quorumkeeper)"

# The lanes build the toolchain's part for tests beside the tests (hack/test_lanes.py); one
# pytest process (PYTEST_ARGS) gets all of it first.
TEST_TOOLCHAIN := $(if $(strip $(PYTEST_ARGS)),toolchain,toolchain-cluster)

.PHONY: test
test: $(TEST_TOOLCHAIN) ## Lint, then every test suite (starts and stops the servers it needs); PYTEST_ARGS=... runs that selection instead
	$(MAKE) --no-print-directory lint
ifeq ($(strip $(PYTEST_ARGS)),)
	$(PYTHON) hack/test_lanes.py
else
	$(PYTHON) -m pytest $(PYTEST_ARGS)
endif

##@ Local cluster

.PHONY: toolchain
toolchain: ## Build/install the pinned control plane, etcd, ansible-operator, CoreDNS, MinIO, Prometheus, OLM, opm, operator-sdk, cert-manager, node agent, soak checker, venv
	python3 hack/toolchain/install.py

.PHONY: toolchain-cluster
toolchain-cluster: ## Only what the local cluster, the operator and the demo need (control plane, etcd, ansible-operator, CoreDNS, node agent, venv)
	python3 hack/toolchain/install.py --part cluster

.PHONY: cluster-up
cluster-up: toolchain-cluster ## Start the local cluster (idempotent); prints the kubeconfig path
	$(LOCALCLUSTER) up

.PHONY: cluster-down
cluster-down: ## Stop the local cluster and remove everything it created
	@if [ -x $(PYTHON) ]; then $(LOCALCLUSTER) down; else echo "no toolchain, nothing to stop"; fi

.PHONY: cluster-status
cluster-status: ## Show the local cluster's components and nodes
	$(LOCALCLUSTER) status

.PHONY: object-stores
object-stores: toolchain cluster-up ## MinIO, moto (S3) and fake-gcs-server in the cluster, with a bucket each; prints their URLs
	$(PYTHON) hack/cluster/object_stores.py up

##@ Operator SDK targets

.PHONY: run
run: toolchain-cluster ## Run the operator on this host against $KUBECONFIG (needs cluster DNS on the host)
	ANSIBLE_CONFIG=$(CURDIR)/ansible.cfg QK_KUBECONFIG=$(KUBECONFIG) \
	PATH=$(VENV)/bin:$$PATH WATCH_NAMESPACE= \
	$$($(PYTHON) -c 'import json;print(json.load(open("$(QK_CACHE)/toolchain.json"))["ansible_operator"])')/ansible-operator \
		run --watches-file=./watches.yaml --health-probe-bind-address=127.0.0.1:6789 --metrics-bind-address=127.0.0.1:8080

.PHONY: install
install: toolchain-cluster ## Install the CRDs into $KUBECONFIG
	$(KUBECTL) apply --server-side -k config/crd

.PHONY: uninstall
uninstall: ## Remove the CRDs (and with them every etcd custom resource; PVCs stay)
	$(KUBECTL) delete -k config/crd --ignore-not-found

.PHONY: deploy
deploy: toolchain-cluster ## Deploy the operator (config/default); on the local cluster also "builds" its image
	@if [ "$(KUBECONFIG)" = "$(QK_STATE)/kubeconfig" ]; then $(LOCALCLUSTER) deploy-operator; \
	else $(KUBECTL) apply --server-side -k config/default; fi

.PHONY: undeploy
undeploy: ## Remove the operator (CRDs and etcd data stay)
	$(KUBECTL) delete -k config/manager --ignore-not-found

# operator-sdk from the toolchain (hack/toolchain/operator-sdk); kubectl's built-in kustomize.
OPERATOR_SDK = $(shell python3 -c 'import json;print(json.load(open("$(QK_CACHE)/toolchain.json"))["operator_sdk"]["operator_sdk"])' 2>/dev/null)
BUNDLE_METADATA_OPTS ?= --channels=alpha --default-channel=alpha
BUNDLE_GEN_FLAGS ?= -q --overwrite --version $(VERSION) $(BUNDLE_METADATA_OPTS)

.PHONY: bundle
bundle: toolchain ## Regenerate the OLM bundle (bundle/, bundle.Dockerfile) from config/ with operator-sdk
	$(OPERATOR_SDK) generate kustomize manifests -q
	@# Start from nothing so that a manifest config/ no longer has cannot linger in bundle/.
	rm -rf bundle/manifests
	$(KUBECTL) kustomize config/manifests | $(OPERATOR_SDK) generate bundle $(BUNDLE_GEN_FLAGS)
	$(OPERATOR_SDK) bundle validate ./bundle

.PHONY: bundle-validate
bundle-validate: toolchain ## Validate bundle/ as OperatorHub does (operator-sdk's operatorframework suite)
	$(OPERATOR_SDK) bundle validate ./bundle --select-optional suite=operatorframework

##@ OLM

.PHONY: olm-install
olm-install: toolchain cluster-up ## OLM v0 on the local cluster: its CRDs, olm and catalog operators (idempotent)
	$(PYTHON) hack/olm/olm_install.py

.PHONY: catalog
catalog: olm-install ## File-based catalog of bundle/ (opm), served as CatalogSource olm/quorumkeeper
	$(PYTHON) hack/olm/olm_catalog.py up

##@ Development

.PHONY: lint
lint: toolchain-cluster ## ruff and ansible-lint
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	PATH=$(VENV)/bin:$$PATH ANSIBLE_CONFIG=$(CURDIR)/ansible.cfg $(VENV)/bin/ansible-lint roles playbooks molecule

SCENARIO ?=

.PHONY: molecule
molecule: toolchain cluster-up ## Every molecule scenario (molecule/*) on the local cluster; SCENARIO=name for one
	PATH=$(VENV)/bin:$$PATH $(PYTHON) hack/warm_modules.py $(VENV)/bin/molecule test $(if $(SCENARIO),-s $(SCENARIO),--all)

.PHONY: bench
bench: toolchain cluster-up ## Benchmarks; results in bench/results/
	$(PYTHON) bench/run.py

ROUNDS ?= 100
SOAK_REPORT ?= bench/results/soak.json

.PHONY: soak
soak: toolchain cluster-up ## Chaos soak (ROUNDS=100): faults under load, history checked; bench/results/soak.json
	$(PYTHON) hack/soak.py --rounds $(ROUNDS) --report $(SOAK_REPORT)

.PHONY: help
help: ## Show this help
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make <target>\n"} /^[a-zA-Z_-]+:.*?##/ { printf "  %-16s %s\n", $$1, $$2 } /^##@/ { printf "\n%s\n", substr($$0, 5) }' $(MAKEFILE_LIST)
