//! strata-e2e: the local control plane and the support the end-to-end tests share.
//!
//! - [`plane`]: build and run etcd, kube-apiserver, kube-controller-manager, kube-scheduler and
//!   kwok from their Go modules, with fake nodes in three zones;
//! - [`node`]: the plane's real node (kubelet, containerd, CNI bridge, kube-proxy), for the
//!   in-cluster tier;
//! - [`support`]: one shared cluster per test run (or `E2E_KUBECONFIG`), a namespace per test,
//!   applying YAML, waiting for conditions;
//! - [`services`]: running Strata's service binaries as child processes whose logs are printed
//!   when a test fails;
//! - [`flux`]: a minimal Flux `GitRepository` and an artifact server, for layer tests;
//! - [`release`]: the chart rendered and installed as a user would, services run as their
//!   ServiceAccounts;
//! - [`demo`]: the guided tour of `make demo` / `make demo-check`;
//! - [`chart`]: the Helm chart and the files generated from it (values table, schema, manifests);
//! - [`bench`]: what the `make bench` drivers share (the measured process, percentiles);
//! - [`drain`]: a node drain's eviction storm, for the e2e scenario and its benchmark;
//! - [`rollout_watch`]: a rollout checked on every pod event, for the fault-injection tests;
//! - [`fault_proxy`]: a proxy in front of kube-apiserver that answers some writes with 429 or
//!   409, for the fault-injection tests.

pub mod admission;
pub mod bench;
pub mod chart;
pub mod deletion_watch;
pub mod demo;
pub mod drain;
pub mod fault_proxy;
pub mod flux;
pub mod git;
pub mod http_proxy;
pub mod in_cluster;
pub mod jaeger;
pub mod layout;
pub mod node;
pub mod plane;
pub mod pod_endpoints;
pub mod prometheus;
pub mod release;
pub mod rollout_watch;
pub mod sbom;
pub mod services;
pub mod support;
