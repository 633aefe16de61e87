//! Golden tests: real AdmissionReview requests in, the exact response out.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use core_admission::review::Review;
use core_admission::webhooks::{Cluster, Webhook, ZoneTrackerPlace, decide};
use core_rollout::observed::Observed;
use jiff::Timestamp;
use serde_json::{Value, json};

const NOW: &str = "2026-01-01T12:00:00Z";

fn sts(name: &str, replicas: i64, labels: Value, annotations: Value, status: Value) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": name, "namespace": "mimir", "uid": format!("uid-{name}"), "labels": labels, "annotations": annotations},
        "spec": {"replicas": replicas, "serviceName": "ingester", "selector": {"matchLabels": {"name": name}},
            "template": {"metadata": {"labels": {"name": name}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}},
        "status": status})
}

fn update(resource: &str, old: Value, new: Value) -> Value {
    let sub = if old["kind"] == "Scale" { "scale" } else { "" };
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "705ab4f5-6393-11e8-b7cc-42010a800002", "operation": "UPDATE",
        "kind": {"group": "apps", "version": "v1", "kind": old["kind"]},
        "resource": {"group": "apps", "version": "v1", "resource": resource}, "subResource": sub,
        "name": old["metadata"]["name"], "namespace": "mimir", "oldObject": old, "object": new}})
}

fn scale(name: &str, replicas: i64) -> Value {
    json!({"apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": {"name": name, "namespace": "mimir"}, "spec": {"replicas": replicas}})
}

/// Decides `review` as the server does (decoding only what the webhook reads), and checks
/// that the decision is exactly the one made from the fully decoded review.
fn run(webhook: Webhook, review: Value, state: Vec<Value>) -> (Value, Vec<String>) {
    let body = serde_json::to_vec(&review).unwrap();
    let full = Review::parse(&body).unwrap();
    let review = Review::parse_reading(&body, webhook.reads()).unwrap();
    let cluster = Cluster::new(
        Observed::from_documents("state", state.into_iter().enumerate().collect()).unwrap(),
    );
    let now = NOW.parse::<Timestamp>().unwrap();
    let decision = decide(webhook, &review, &cluster, now);
    assert_eq!(
        decision,
        decide(webhook, &full, &cluster, now),
        "{webhook:?}: the partly decoded review was decided differently"
    );
    (
        review.respond(&decision)["response"].clone(),
        decision.side_effects,
    )
}

const UID: &str = "705ab4f5-6393-11e8-b7cc-42010a800002";

#[test]
fn no_downscale() {
    let labelled = json!({"grafana.com/no-downscale": "true"});
    let down = |labels: Value| {
        update(
            "statefulsets",
            sts("ingester-zone-a", 3, labels.clone(), json!({}), json!({})),
            sts("ingester-zone-a", 2, labels, json!({}), json!({})),
        )
    };
    let deny = json!({"uid": UID, "allowed": false, "status": {"message": "downscale of statefulsets/ingester-zone-a in mimir from 3 to 2 replicas is not allowed because it has the label 'grafana.com/no-downscale=true'"}});
    assert_eq!(
        run(Webhook::NoDownscale, down(labelled.clone()), vec![]).0,
        deny
    );
    assert_eq!(
        run(Webhook::NoDownscale, down(json!({})), vec![]).0,
        json!({"uid": UID, "allowed": true})
    );
    let up = update(
        "statefulsets",
        sts("ingester-zone-a", 2, labelled.clone(), json!({}), json!({})),
        sts("ingester-zone-a", 3, labelled.clone(), json!({}), json!({})),
    );
    assert_eq!(
        run(Webhook::NoDownscale, up, vec![]).0,
        json!({"uid": UID, "allowed": true})
    );
    // The /scale subresource: labels come from the parent in the cluster.
    let parent = sts("ingester-zone-a", 3, labelled, json!({}), json!({}));
    assert_eq!(
        run(
            Webhook::NoDownscale,
            update(
                "statefulsets",
                scale("ingester-zone-a", 3),
                scale("ingester-zone-a", 2)
            ),
            vec![parent]
        )
        .0,
        deny
    );
    let (missing, _) = run(
        Webhook::NoDownscale,
        update(
            "statefulsets",
            scale("ingester-zone-a", 3),
            scale("ingester-zone-a", 2),
        ),
        vec![],
    );
    assert_eq!(missing["allowed"], true);
    assert_eq!(
        missing["warnings"][0],
        "can't get statefulsets/ingester-zone-a in namespace mimir, allowing the change: statefulsets.apps \"ingester-zone-a\" not found"
    );
    // Fail-open on what it cannot judge.
    let mut nil = down(json!({"grafana.com/no-downscale": "true"}));
    nil["request"]["object"]["spec"]
        .as_object_mut()
        .unwrap()
        .remove("replicas");
    assert_eq!(
        run(Webhook::NoDownscale, nil, vec![]).0["warnings"][0],
        "old/new replicas is nil, allowing the change"
    );
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}});
    assert_eq!(
        run(
            Webhook::NoDownscale,
            update("pods", pod.clone(), pod),
            vec![]
        )
        .0["allowed"],
        true
    );
}

/// The anchor's warnings for reviews whose replica counts cannot be judged, word for word (read
/// from its source and checked against it): users and its tests match on them. Listed in
/// docs/rollout-operator.md as part of the compatibility contract.
#[test]
fn no_downscale_warnings_are_the_anchors() {
    let sts = |spec: Value| json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "s", "namespace": "mimir"}, "spec": spec});
    let three = sts(json!({"replicas": 3}));
    let two = sts(json!({"replicas": 2}));
    let review = |old: Option<Value>, new: Option<Value>| {
        let mut r = update("statefulsets", three.clone(), two.clone());
        let request = r["request"].as_object_mut().unwrap();
        for (key, value) in [("oldObject", old), ("object", new)] {
            match value {
                Some(v) => request.insert(key.into(), v),
                None => request.remove(key),
            };
        }
        r
    };
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}});
    let cases = [
        (
            review(None, Some(two.clone())),
            "can't decode old object, allowing the change, err: Object 'Kind' is missing in ''",
        ),
        (
            review(Some(three.clone()), None),
            "can't decode new object, allowing the change, err: Object 'Kind' is missing in ''",
        ),
        (
            review(Some(sts(json!({}))), Some(two.clone())),
            "old/new replicas is nil, allowing the change",
        ),
        (
            review(Some(three.clone()), Some(sts(json!({})))),
            "old/new replicas is nil, allowing the change",
        ),
        (
            review(Some(pod.clone()), Some(pod)),
            "can't get old replicas, allowing the change, err: unsupported type /v1, Kind=Pod (go type *v1.Pod)",
        ),
        (
            review(
                Some(
                    json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "d"}}),
                ),
                Some(two.clone()),
            ),
            "can't get old replicas, allowing the change, err: unsupported type apps/v1, Kind=DaemonSet (go type *v1.DaemonSet)",
        ),
        (
            review(
                Some(
                    json!({"apiVersion": "example.com/v1", "kind": "Widget", "spec": {"replicas": 3}}),
                ),
                Some(two.clone()),
            ),
            "can't decode old object, allowing the change, err: no kind \"Widget\" is registered for version \"example.com/v1\" in scheme \"pkg/admission/scheme.go:21\"",
        ),
        (
            review(
                Some(json!({"apiVersion": "apps/v1", "spec": {"replicas": 3}})),
                Some(two.clone()),
            ),
            "can't decode old object, allowing the change, err: Object 'Kind' is missing in '{\"apiVersion\":\"apps/v1\",\"spec\":{\"replicas\":3}}'",
        ),
        (
            review(
                Some(three.clone()),
                Some(json!({"kind": "StatefulSet", "spec": {"replicas": 2}})),
            ),
            "can't decode new object, allowing the change, err: Object 'apiVersion' is missing in '{\"kind\":\"StatefulSet\",\"spec\":{\"replicas\":2}}'",
        ),
        (
            review(Some(sts(json!({"replicas": "3"}))), Some(two.clone())),
            "can't decode old object, allowing the change, err: json: cannot unmarshal string into Go struct field StatefulSetSpec.spec.replicas of type int32",
        ),
        (
            review(Some(sts(json!({"replicas": 2.5}))), Some(two.clone())),
            "can't decode old object, allowing the change, err: json: cannot unmarshal number 2.5 into Go struct field StatefulSetSpec.spec.replicas of type int32",
        ),
        (
            review(
                Some(sts(json!({"replicas": 3_000_000_000_i64}))),
                Some(two.clone()),
            ),
            "can't decode old object, allowing the change, err: json: cannot unmarshal number 3000000000 into Go struct field StatefulSetSpec.spec.replicas of type int32",
        ),
        (
            review(
                Some(json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "spec": "x"})),
                Some(two.clone()),
            ),
            "can't decode old object, allowing the change, err: json: cannot unmarshal string into Go struct field StatefulSet.spec of type v1.StatefulSetSpec",
        ),
    ];
    for (review, want) in cases {
        let (response, _) = run(Webhook::NoDownscale, review.clone(), vec![]);
        assert_eq!(response["allowed"], true, "{review}");
        assert_eq!(response["warnings"], json!([want]), "{review}");
    }
    // prepare-downscale folds "no replicas" into its decode warning, as the anchor does.
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}});
    let (response, _) = run(
        Webhook::PrepareDownscale,
        review(Some(pod.clone()), Some(pod)),
        vec![],
    );
    assert_eq!(
        response["warnings"],
        json!([
            "can't decode old object, allowing the change, err: unsupported type /v1, Kind=Pod (go type *v1.Pod)"
        ])
    );
}

/// kube-apiserver leaves `replicas: 0` out of a Scale; it means 0, so a `/scale` to 0 of a
/// labelled StatefulSet is a downscale and is denied (read as "unset", it went through).
#[test]
fn a_scale_to_zero_without_a_replicas_field_is_a_downscale() {
    let labelled = json!({"grafana.com/no-downscale": "true"});
    let parent = sts("ingester-zone-a", 3, labelled, json!({}), json!({}));
    let mut to_zero = scale("ingester-zone-a", 0);
    to_zero["spec"].as_object_mut().unwrap().remove("replicas");
    let (response, _) = run(
        Webhook::NoDownscale,
        update("statefulsets", scale("ingester-zone-a", 3), to_zero),
        vec![parent],
    );
    assert_eq!(response["allowed"], false, "{response}");
    assert_eq!(
        response["status"]["message"],
        "downscale of statefulsets/ingester-zone-a in mimir from 3 to 0 replicas is not allowed because it has the label 'grafana.com/no-downscale=true'"
    );
}

/// What the cluster holds for a StatefulSet a review is about: the object itself and one pod
/// per replica, owned by it (the only pods prepare-downscale calls).
fn live(sts: &Value) -> Vec<Value> {
    let name = sts["metadata"]["name"].as_str().unwrap();
    let mut state = vec![sts.clone()];
    for ordinal in 0..sts["spec"]["replicas"].as_i64().unwrap() {
        state.push(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("{name}-{ordinal}"), "namespace": "mimir",
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": name,
                    "uid": sts["metadata"]["uid"], "controller": true}]},
            "spec": {"containers": [{"name": "c", "image": "x"}]},
            "status": {"podIP": format!("10.1.{}.{}", ordinal / 256, ordinal % 256)}}));
    }
    state
}

fn prepared(labels: Value, annotations: Value) -> Value {
    sts(
        "ingester-zone-a",
        3,
        labels,
        annotations,
        json!({"replicas": 3, "readyReplicas": 3, "updatedReplicas": 3}),
    )
}

/// A review naming an absurd replica count (forged, or a StatefulSet at 2^31-1) is refused
/// before a single pod address is built; the largest allowed span still prepares every pod.
#[test]
fn prepare_downscale_bounds_the_pods_one_request_prepares() {
    let labels = json!({"grafana.com/prepare-downscale": "true", "rollout-group": "ingester"});
    let annotations = json!({"grafana.com/prepare-downscale-http-path": "prepare", "grafana.com/prepare-downscale-http-port": "80"});
    let downscale = |old: i64, new: i64| {
        let mut before = prepared(labels.clone(), annotations.clone());
        before["spec"]["replicas"] = json!(old);
        before["status"] = json!({"replicas": old, "readyReplicas": old, "updatedReplicas": old});
        let mut after = before.clone();
        after["spec"]["replicas"] = json!(new);
        // The pods, unless absurdly many: the bound is checked before any pod is looked at.
        let state = if old <= 2000 {
            live(&before)
        } else {
            vec![before.clone()]
        };
        run(
            Webhook::PrepareDownscale,
            update("statefulsets", before, after),
            state,
        )
    };
    let (response, effects) = downscale(i64::from(i32::MAX), 0);
    assert_eq!(response["allowed"], false, "{response}");
    assert!(effects.is_empty(), "{} side effects", effects.len());
    assert_eq!(
        response["status"]["message"],
        format!(
            "downscale of statefulsets/ingester-zone-a in mimir from {} to 0 replicas is not allowed because it would prepare {} pods, more than the 1000 one request may; scale down in steps of at most 1000 replicas.",
            i32::MAX,
            i32::MAX
        )
    );
    let (response, effects) = downscale(1001, 1);
    assert_eq!(response["allowed"], true, "{response}");
    assert_eq!(
        effects.iter().filter(|e| e.starts_with("POST ")).count(),
        1000
    );
    let (response, _) = downscale(1002, 1);
    assert_eq!(response["allowed"], false, "{response}");
}

#[test]
fn prepare_downscale_checks_then_lists_its_calls() {
    let labels = json!({"grafana.com/prepare-downscale": "true", "rollout-group": "ingester"});
    let annotations = json!({"grafana.com/prepare-downscale-http-path": "ingester/prepare-shutdown", "grafana.com/prepare-downscale-http-port": "80"});
    let review = |labels: Value, annotations: Value| {
        let mut new = prepared(labels.clone(), annotations.clone());
        new["spec"]["replicas"] = json!(1);
        update("statefulsets", prepared(labels, annotations), new)
    };
    // The review's StatefulSet as the cluster holds it, its pods, and `more` objects.
    let cluster = |labels: &Value, annotations: &Value, more: Vec<Value>| {
        [live(&prepared(labels.clone(), annotations.clone())), more].concat()
    };
    let (response, effects) = run(
        Webhook::PrepareDownscale,
        review(labels.clone(), annotations.clone()),
        cluster(&labels, &annotations, vec![]),
    );
    assert_eq!(
        response,
        json!({"uid": UID, "allowed": true, "status": {"message": "downscale of statefulsets/ingester-zone-a in mimir from 3 to 1 replicas is allowed -- all pods successfully prepared for shutdown."}})
    );
    assert_eq!(
        effects,
        vec![
            "POST http://10.1.0.2:80/ingester/prepare-shutdown",
            "POST http://10.1.0.1:80/ingester/prepare-shutdown",
            "PATCH statefulsets/ingester-zone-a in mimir once it has 1 replicas: grafana.com/last-downscale=2026-01-01T12:00:00Z",
        ]
    );
    let msg = |r: (Value, Vec<String>)| {
        r.0["status"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    let prefix = "downscale of statefulsets/ingester-zone-a in mimir from 3 to 1 replicas is not allowed because ";
    assert_eq!(
        msg(run(
            Webhook::PrepareDownscale,
            review(
                labels.clone(),
                json!({"grafana.com/prepare-downscale-http-path": "x"})
            ),
            cluster(
                &labels,
                &json!({"grafana.com/prepare-downscale-http-path": "x"}),
                vec![]
            )
        )),
        format!(
            "{prefix}the grafana.com/prepare-downscale-http-port annotation is not set or empty."
        )
    );
    assert_eq!(
        msg(run(
            Webhook::PrepareDownscale,
            review(
                labels.clone(),
                json!({"grafana.com/prepare-downscale-http-port": "80"})
            ),
            cluster(
                &labels,
                &json!({"grafana.com/prepare-downscale-http-port": "80"}),
                vec![]
            )
        )),
        format!(
            "{prefix}the grafana.com/prepare-downscale-http-path annotation is not set or empty."
        )
    );
    // A sibling zone downscaled 10 minutes ago and asks for 30 minutes between zones.
    let sibling = sts(
        "ingester-zone-b",
        3,
        json!({"rollout-group": "ingester", "grafana.com/min-time-between-zones-downscale": "30m"}),
        json!({"grafana.com/last-downscale": "2026-01-01T11:50:00Z"}),
        json!({"replicas": 3, "readyReplicas": 3, "updatedReplicas": 3}),
    );
    assert_eq!(
        msg(run(
            Webhook::PrepareDownscale,
            review(labels.clone(), annotations.clone()),
            cluster(&labels, &annotations, vec![sibling])
        )),
        format!(
            "{prefix}statefulset ingester-zone-b was downscaled at 2026-01-01 11:50:00 +0000 UTC and is labelled to wait 30m0s between zone downscales"
        )
    );
    // The same sibling with no time recorded, but a downscale of it this server admitted 10
    // minutes ago whose time is not written yet: it counts as recorded, and the later of
    // the two counts when both are there.
    let unrecorded = |annotations: Value| {
        sts(
            "ingester-zone-b",
            3,
            json!({"rollout-group": "ingester", "grafana.com/min-time-between-zones-downscale": "30m"}),
            annotations,
            json!({"replicas": 3, "readyReplicas": 3, "updatedReplicas": 3}),
        )
    };
    let with_pending = |sibling: Value, pending: &str| {
        let review = review(labels.clone(), annotations.clone());
        let body = serde_json::to_vec(&review).unwrap();
        let review = Review::parse(&body).unwrap();
        let state = cluster(&labels, &annotations, vec![sibling]);
        let mut cluster = Cluster::new(
            Observed::from_documents("state", state.into_iter().enumerate().collect()).unwrap(),
        );
        cluster
            .pending_downscales
            .insert("ingester-zone-b".into(), pending.parse().unwrap());
        let decision = decide(
            Webhook::PrepareDownscale,
            &review,
            &cluster,
            NOW.parse().unwrap(),
        );
        decision.message.unwrap_or_default()
    };
    assert_eq!(
        with_pending(unrecorded(json!({})), "2026-01-01T11:50:00Z"),
        format!(
            "{prefix}statefulset ingester-zone-b was downscaled at 2026-01-01 11:50:00 +0000 UTC and is labelled to wait 30m0s between zone downscales"
        )
    );
    assert_eq!(
        with_pending(
            unrecorded(json!({"grafana.com/last-downscale": "2026-01-01T11:00:00Z"})),
            "2026-01-01T11:50:00Z"
        ),
        format!(
            "{prefix}statefulset ingester-zone-b was downscaled at 2026-01-01 11:50:00 +0000 UTC and is labelled to wait 30m0s between zone downscales"
        )
    );
    // Pending an hour ago, outside the window: past the time check, on to the next one (the
    // sibling's pods, absent here, are not ready).
    assert_eq!(
        with_pending(unrecorded(json!({})), "2026-01-01T11:00:00Z"),
        format!(
            "{prefix}statefulset ingester-zone-b has 0 non-updated replicas and 3 non-ready replicas"
        )
    );
    // A sibling's recorded time that does not parse.
    let unreadable = sts(
        "ingester-zone-b",
        3,
        json!({"rollout-group": "ingester", "grafana.com/min-time-between-zones-downscale": "30m"}),
        json!({"grafana.com/last-downscale": "yesterday"}),
        json!({"replicas": 3, "readyReplicas": 3, "updatedReplicas": 3}),
    );
    assert_eq!(
        msg(run(
            Webhook::PrepareDownscale,
            review(labels.clone(), annotations.clone()),
            cluster(&labels, &annotations, vec![unreadable])
        )),
        format!("{prefix}parsing downscale annotations failed.")
    );
    // A sibling zone is not fully updated and ready (no ready pods in the state).
    let busy = sts(
        "ingester-zone-b",
        3,
        json!({"rollout-group": "ingester"}),
        json!({}),
        json!({"replicas": 3, "readyReplicas": 3, "updatedReplicas": 2}),
    );
    assert_eq!(
        msg(run(
            Webhook::PrepareDownscale,
            review(labels.clone(), annotations.clone()),
            cluster(&labels, &annotations, vec![busy])
        )),
        format!(
            "{prefix}statefulset ingester-zone-b has 1 non-updated replicas and 3 non-ready replicas"
        )
    );
    // Dry runs and unlabelled StatefulSets are left alone.
    let mut dry = review(labels.clone(), annotations.clone());
    dry["request"]["dryRun"] = json!(true);
    assert_eq!(
        run(Webhook::PrepareDownscale, dry, vec![]),
        (json!({"uid": UID, "allowed": true}), vec![])
    );
    assert_eq!(
        run(
            Webhook::PrepareDownscale,
            review(json!({}), annotations.clone()),
            cluster(&json!({}), &annotations, vec![])
        ),
        (json!({"uid": UID, "allowed": true}), vec![])
    );
    // Forged or stale reviews: nothing is called or recorded, and the denial says why.
    let forged = |review: Value, state: Vec<Value>, why: &str| {
        let (response, effects) = run(Webhook::PrepareDownscale, review, state);
        assert_eq!(response["allowed"], false, "{why}: {response}");
        assert!(effects.is_empty(), "{why}: {effects:?}");
        let message = response["status"]["message"].as_str().unwrap().to_string();
        assert!(
            message.starts_with("downscale of statefulsets/ingester-zone-a in mimir from ")
                && message.contains("is not allowed because "),
            "{why}: {message}"
        );
        assert!(
            message.ends_with("; nothing was prepared"),
            "{why}: {message}"
        );
        message
    };
    let message = forged(
        review(labels.clone(), annotations.clone()),
        vec![],
        "no such StatefulSet",
    );
    assert!(
        message.contains("statefulset mimir/ingester-zone-a does not exist"),
        "{message}"
    );
    let mut other_uid = review(labels.clone(), annotations.clone());
    other_uid["request"]["oldObject"]["metadata"]["uid"] = json!("uid-forged");
    let message = forged(
        other_uid,
        cluster(&labels, &annotations, vec![]),
        "another uid",
    );
    assert!(
        message.contains(r#"uid "uid-forged""#) && message.contains(r#"uid "uid-ingester-zone-a""#),
        "{message}"
    );
    let mut no_uid = review(labels.clone(), annotations.clone());
    no_uid["request"]["oldObject"]["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("uid");
    forged(no_uid, cluster(&labels, &annotations, vec![]), "no uid");
    // A port and path of the review's own choosing (a pod's other endpoint, say).
    let aimed = json!({"grafana.com/prepare-downscale-http-path": "admin/shutdown", "grafana.com/prepare-downscale-http-port": "9095"});
    let message = forged(
        review(labels.clone(), aimed),
        cluster(&labels, &annotations, vec![]),
        "forged port",
    );
    assert!(
        message.contains("annotation grafana.com/prepare-downscale-http-port"),
        "{message}"
    );
    let mut elsewhere = review(labels.clone(), annotations.clone());
    elsewhere["request"]["oldObject"]["spec"]["serviceName"] = json!("other");
    let message = forged(
        elsewhere,
        cluster(&labels, &annotations, vec![]),
        "forged service",
    );
    assert!(message.contains("spec.serviceName"), "{message}");
    // A larger old count than the live object has: pods it does not run.
    let mut wider = review(labels.clone(), annotations.clone());
    wider["request"]["oldObject"]["spec"]["replicas"] = json!(9);
    let message = forged(wider, cluster(&labels, &annotations, vec![]), "replicas");
    assert!(message.contains("has 3 replicas, not the 9"), "{message}");
    // A pod of the right name owned by something else is never called.
    let mut state = cluster(&labels, &annotations, vec![]);
    state.retain(|o| o["metadata"]["name"] != "ingester-zone-a-2");
    state.push(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "ingester-zone-a-2", "namespace": "mimir",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "ingester-zone-a", "uid": "uid-other", "controller": true}]},
        "spec": {"containers": [{"name": "c", "image": "x"}]}}));
    let (response, effects) = run(
        Webhook::PrepareDownscale,
        review(labels.clone(), annotations.clone()),
        state,
    );
    assert_eq!(
        effects
            .iter()
            .filter(|e| e.starts_with("POST "))
            .collect::<Vec<_>>(),
        vec!["POST http://10.1.0.1:80/ingester/prepare-shutdown"]
    );
    assert_eq!(
        response["warnings"],
        json!([
            "pod mimir/ingester-zone-a-2 is not a pod of statefulset mimir/ingester-zone-a; it was not called"
        ])
    );
    // A pod going away with no address (not running) cannot prepare: the downscale is refused
    // and nobody is called.
    let mut state = cluster(&labels, &annotations, vec![]);
    for object in &mut state {
        if object["metadata"]["name"] == "ingester-zone-a-1" {
            object["status"] = json!({"phase": "Pending"});
        }
    }
    let (response, effects) = run(
        Webhook::PrepareDownscale,
        review(labels.clone(), annotations.clone()),
        state,
    );
    assert_eq!(response["allowed"], false, "{response}");
    assert_eq!(
        response["status"]["message"],
        format!(
            "{prefix}pod ingester-zone-a-1 has no IP address yet, so it cannot be told to prepare for shutdown; nothing was prepared."
        )
    );
    assert!(effects.is_empty(), "{effects:?}");
}

fn eviction(pod: &str, operation: &str, sub: &str) -> Value {
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": UID, "operation": operation, "kind": {"group": "policy", "version": "v1", "kind": "Eviction"},
        "resource": {"group": "", "version": "v1", "resource": "pods"}, "subResource": sub,
        "name": pod, "namespace": "mimir", "object": {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod, "namespace": "mimir"}}}})
}

fn zone_pod(zone: &str, i: usize, ready: bool) -> Value {
    let sts = format!("ingester-zone-{zone}");
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("{sts}-{i}"), "namespace": "mimir", "labels": {"name": sts, "rollout-group": "ingester"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": sts, "uid": "u", "controller": true}]},
        "spec": {"containers": [{"name": "c", "image": "x"}]},
        "status": {"phase": "Running", "containerStatuses": [{"name": "c", "image": "x", "imageID": "", "restartCount": 0, "ready": ready, "state": {"running": {}}}]}})
}

fn zones(not_ready: &[(&str, usize)]) -> Vec<Value> {
    let mut state = vec![
        json!({"apiVersion": "rollout-operator.grafana.com/v1", "kind": "ZoneAwarePodDisruptionBudget",
        "metadata": {"name": "ingester", "namespace": "mimir"}, "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"rollout-group": "ingester"}}}}),
    ];
    for zone in ["a", "b", "c"] {
        state.push(sts(
            &format!("ingester-zone-{zone}"),
            2,
            json!({"rollout-group": "ingester"}),
            json!({}),
            json!({"replicas": 2, "readyReplicas": 2}),
        ));
        for i in 0..2 {
            state.push(zone_pod(zone, i, !not_ready.contains(&(zone, i))));
        }
    }
    state
}

#[test]
fn pod_eviction_counts_zones() {
    let code_msg = |r: (Value, Vec<String>)| {
        (
            r.0["allowed"].as_bool().unwrap(),
            r.0["status"]["code"].as_u64(),
            r.0["status"]["message"].as_str().map(str::to_string),
        )
    };
    assert_eq!(
        code_msg(run(
            Webhook::PodEviction,
            eviction("ingester-zone-a-0", "CREATE", "eviction"),
            zones(&[])
        )),
        (true, None, None)
    );
    // Another zone is already disrupted: evicting here would disrupt two zones.
    assert_eq!(
        code_msg(run(
            Webhook::PodEviction,
            eviction("ingester-zone-a-0", "CREATE", "eviction"),
            zones(&[("b", 1)])
        )),
        (
            false,
            Some(429),
            Some("1 pod not ready in ingester-zone-b".into())
        )
    );
    // The own zone already uses its budget of 1.
    assert_eq!(
        code_msg(run(
            Webhook::PodEviction,
            eviction("ingester-zone-a-0", "CREATE", "eviction"),
            zones(&[("a", 1)])
        )),
        (
            false,
            Some(429),
            Some("1 pod not ready in ingester-zone-a".into())
        )
    );
    assert_eq!(
        code_msg(run(
            Webhook::PodEviction,
            eviction("ingester-zone-a-0", "UPDATE", "eviction"),
            zones(&[])
        )),
        (
            false,
            Some(400),
            Some("request operation is not create, got: UPDATE".into())
        )
    );
    assert_eq!(
        code_msg(run(
            Webhook::PodEviction,
            eviction("ingester-zone-a-0", "CREATE", "status"),
            zones(&[])
        )),
        (
            false,
            Some(400),
            Some("request SubResource is not eviction, got: status".into())
        )
    );
    assert_eq!(
        code_msg(run(
            Webhook::PodEviction,
            eviction("nope", "CREATE", "eviction"),
            zones(&[])
        )),
        (false, Some(400), Some("pods \"nope\" not found".into()))
    );
    let (not_ready, _) = run(
        Webhook::PodEviction,
        eviction("ingester-zone-b-1", "CREATE", "eviction"),
        zones(&[("b", 1)]),
    );
    assert_eq!(
        not_ready["allowed"], true,
        "a NotReady pod is Running: counted; here it's its own zone's only not-ready pod"
    );
}

/// (allowed, code, message) of one eviction review.
fn evict(pod: &str, state: Vec<Value>) -> (bool, Option<u64>, Option<String>) {
    let (r, _) = run(
        Webhook::PodEviction,
        eviction(pod, "CREATE", "eviction"),
        state,
    );
    (
        r["allowed"].as_bool().unwrap(),
        r["status"]["code"].as_u64(),
        r["status"]["message"].as_str().map(str::to_string),
    )
}

fn with_zpdb_spec(mut state: Vec<Value>, spec: Value) -> Vec<Value> {
    state[0]["spec"] = spec;
    state
}

#[test]
fn eviction_rules_match_the_anchor() {
    // maxUnavailablePercentage 0 allows nothing (it used to round up to 1).
    let pct0 = with_zpdb_spec(
        zones(&[]),
        json!({"maxUnavailablePercentage": 0, "selector": {"matchLabels": {"rollout-group": "ingester"}}}),
    );
    assert_eq!(
        evict("ingester-zone-a-0", pct0),
        (false, Some(403), Some("max unavailable = 0".into()))
    );
    // 50 % of 2 replicas is 1.
    let pct50 = with_zpdb_spec(
        zones(&[]),
        json!({"maxUnavailablePercentage": 50, "selector": {"matchLabels": {"rollout-group": "ingester"}}}),
    );
    assert!(evict("ingester-zone-a-0", pct50).0);
    // An empty matchLabels selects every pod and StatefulSet of the namespace.
    let everything = with_zpdb_spec(
        zones(&[("b", 0), ("b", 1)]),
        json!({"maxUnavailable": 1, "selector": {"matchLabels": {}}}),
    );
    assert_eq!(
        evict("ingester-zone-a-0", everything),
        (
            false,
            Some(429),
            Some("2 pods not ready in ingester-zone-b".into())
        )
    );
}

#[test]
fn partition_mode_counts_missing_pods_of_other_zones_as_unknown() {
    let partitioned = json!({"maxUnavailable": 1, "podNamePartitionRegex": "[a-z-]+-([0-9]+)",
        "selector": {"matchLabels": {"rollout-group": "ingester"}}});
    // Zone b lost pod 1 (not this partition's pod): its absence may hide partition 0's
    // replacement, so partition 0 counts one pod unknown and the eviction waits.
    let mut state = with_zpdb_spec(zones(&[]), partitioned.clone());
    state.retain(|o| o["metadata"]["name"] != "ingester-zone-b-1");
    assert_eq!(
        evict("ingester-zone-a-0", state),
        (
            false,
            Some(429),
            Some("1 pod unknown in partition 0".into())
        )
    );
    let healthy = with_zpdb_spec(zones(&[]), partitioned.clone());
    assert!(evict("ingester-zone-a-0", healthy).0);
    let other_partition_down = with_zpdb_spec(zones(&[("b", 1)]), partitioned);
    assert!(
        evict("ingester-zone-a-0", other_partition_down).0,
        "partition 1's not-ready pod does not touch partition 0"
    );
}

#[test]
fn zpdb_validation() {
    let review = |spec: Value| {
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": UID, "operation": "CREATE", "name": "z", "namespace": "mimir",
        "object": {"apiVersion": "rollout-operator.grafana.com/v1", "kind": "ZoneAwarePodDisruptionBudget", "metadata": {"name": "z"}, "spec": spec}}})
    };
    assert_eq!(
        run(
            Webhook::ZpdbValidation,
            review(json!({"maxUnavailable": 1, "selector": {"matchLabels": {"a": "b"}}})),
            vec![]
        )
        .0,
        json!({"uid": UID, "allowed": true})
    );
    assert_eq!(
        run(
            Webhook::ZpdbValidation,
            review(json!({"maxUnavailable": -1, "selector": {"matchLabels": {"a": "b"}}})),
            vec![]
        )
        .0,
        json!({"uid": UID, "allowed": false, "status": {"code": 400, "message": "invalid value: max unavailable must be 0 <= val, got -1"}})
    );
}

fn layer(name: &str, depends_on: &[&str], extra: Value) -> Value {
    let mut l = json!({"apiVersion": "strata.dev/v1alpha1", "kind": "AddonsLayer", "metadata": {"name": name},
        "spec": {"version": "1.0.0", "source": {"name": "repo", "path": "./layers/x"}, "prereqs": {"dependsOn": depends_on}}});
    if let (Value::Object(spec), Value::Object(e)) = (&mut l["spec"], extra) {
        spec.extend(e);
    }
    l
}

fn layer_review(object: Value) -> Value {
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": UID, "operation": "CREATE", "name": object["metadata"]["name"], "object": object}})
}

#[test]
fn addonslayer_validation() {
    let msg = |object: Value, state: Vec<Value>| {
        let (response, _) = run(Webhook::AddonsLayerValidation, layer_review(object), state);
        response["status"]["message"].as_str().map(str::to_string)
    };
    assert_eq!(
        msg(
            layer("apps", &["base@>=1.2,<2", "bootstrap"], json!({})),
            vec![]
        ),
        None,
        "valid layer allowed"
    );
    assert_eq!(
        msg(layer("apps", &["base@>=x"], json!({})), vec![]).unwrap(),
        "AddonsLayer apps: spec.prereqs.dependsOn[0]: \">=x\": \"x\" is not a version like 1.2 or 1.2.3"
    );
    assert_eq!(
        msg(layer("apps", &["ok", "apps@1.0.0"], json!({})), vec![]).unwrap(),
        "AddonsLayer apps: spec.prereqs.dependsOn[1]: a layer cannot depend on itself"
    );
    assert_eq!(
        msg(
            layer(
                "apps",
                &[],
                json!({"source": {"name": "r", "path": "layers/x"}})
            ),
            vec![]
        )
        .unwrap(),
        "AddonsLayer apps: spec.source.path: \"layers/x\" must start with ./ and stay inside the source"
    );
    assert_eq!(
        msg(
            layer("apps", &[], json!({"prereqs": {"k8sVersion": "latest"}})),
            vec![]
        )
        .unwrap(),
        "AddonsLayer apps: spec.prereqs.k8sVersion: \"latest\" is not a version like v1.29 or 1.30.2"
    );
    assert_eq!(
        msg(layer("apps", &[], json!({"timeout": "soon"})), vec![]).unwrap(),
        "AddonsLayer apps: spec.timeout: \"soon\" is not a duration like 30s, 5m or 1h"
    );
    assert_eq!(
        msg(
            layer(
                "apps",
                &[],
                json!({"drift": {"mode": "Warn", "observe": [{"kind": "Deployment", "paths": ["spec..image"]}]}})
            ),
            vec![]
        )
        .unwrap_or_default()
        .split(':')
        .take(2)
        .collect::<Vec<_>>()
        .join(":"),
        "AddonsLayer apps: spec.drift.observe[0].paths[0] \"spec..image\"",
        "an invalid drift path is refused, naming the field"
    );
    assert_eq!(
        msg(
            layer(
                "apps",
                &[],
                json!({"drift": {"mode": "Heal", "observe": [{"kind": "Deployment", "paths": ["spec.template.spec.containers[name=app].image"]}]}})
            ),
            vec![]
        ),
        None,
        "a valid drift spec is allowed"
    );
    // base depends on apps already; apps depending on base closes the cycle.
    let existing = vec![
        layer("base", &["bootstrap"], json!({})),
        layer("bootstrap", &["apps@1.0.0"], json!({})),
    ];
    assert_eq!(
        msg(layer("apps", &["base"], json!({})), existing.clone()).unwrap(),
        "AddonsLayer apps: dependency cycle: apps -> base -> bootstrap -> apps"
    );
    assert_eq!(
        msg(layer("other", &["base"], json!({})), existing).unwrap_or_default(),
        "",
        "a layer outside the cycle is fine"
    );
    let (response, _) = run(
        Webhook::AddonsLayerValidation,
        layer_review(
            json!({"apiVersion": "strata.dev/v1alpha1", "kind": "AddonsLayer", "metadata": {"name": "x"}, "spec": {"version": 3}}),
        ),
        vec![],
    );
    assert_eq!(
        response["status"]["code"], 400,
        "a malformed spec is rejected: {response}"
    );
}

/// Zone-tracker mode: sibling times come from the ConfigMap (a missing entry is skipped), and
/// the downscale is recorded there instead of on the StatefulSet.
#[test]
fn prepare_downscale_with_the_zone_tracker() {
    use core_admission::webhooks::ZoneTracker;
    let labels = json!({"grafana.com/prepare-downscale": "true", "rollout-group": "ingester"});
    let annotations = json!({"grafana.com/prepare-downscale-http-path": "prepare", "grafana.com/prepare-downscale-http-port": "80"});
    let mut new = prepared(labels.clone(), annotations.clone());
    new["spec"]["replicas"] = json!(2);
    let target = prepared(labels, annotations);
    let review =
        Review::parse(&serde_json::to_vec(&update("statefulsets", target.clone(), new)).unwrap())
            .unwrap();
    // The sibling's annotation says "just now", but in zone-tracker mode only the ConfigMap
    // counts.
    let sibling = sts(
        "ingester-zone-b",
        3,
        json!({"rollout-group": "ingester", "grafana.com/min-time-between-zones-downscale": "30m"}),
        json!({"grafana.com/last-downscale": "2026-01-01T11:59:00Z"}),
        json!({"replicas": 0, "readyReplicas": 0, "updatedReplicas": 0}),
    );
    let decide_with = |data: Option<Vec<(&str, &str)>>| {
        let state = [live(&target), vec![sibling.clone()]].concat();
        let mut cluster = Cluster::new(
            Observed::from_documents("state", state.into_iter().enumerate().collect()).unwrap(),
        );
        // The server runs in its own namespace, not in the StatefulSet's.
        let place = ZoneTrackerPlace {
            namespace: "strata-system".into(),
            name: "rollout-operator-zone-tracker".into(),
        };
        cluster.zone_tracker = Some(ZoneTracker {
            namespace: place.namespace.clone(),
            config_map: place.config_map_for("mimir"),
            data: data.map(|d| {
                d.into_iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect()
            }),
        });
        decide(
            Webhook::PrepareDownscale,
            &review,
            &cluster,
            NOW.parse::<Timestamp>().unwrap(),
        )
    };
    let prefix = "downscale of statefulsets/ingester-zone-a in mimir from 3 to 2 replicas is not allowed because ";
    // No ConfigMap yet: allowed, and it is created holding only this zone's entry.
    let allowed = decide_with(None);
    assert!(allowed.allowed, "{allowed:?}");
    assert_eq!(
        allowed.side_effects.last().unwrap(),
        r#"CREATE configmaps/rollout-operator-zone-tracker-mimir in strata-system: ingester-zone-a={"lastDownscaled":"2026-01-01T12:00:00Z"}"#
    );
    // No entry for the sibling: skipped. An old entry: allowed; the map is updated.
    for data in [
        vec![(
            "ingester-zone-c",
            r#"{"lastDownscaled":"2026-01-01T11:59:00Z"}"#,
        )],
        vec![(
            "ingester-zone-b",
            r#"{"lastDownscaled":"2026-01-01T10:00:00Z"}"#,
        )],
    ] {
        let decision = decide_with(Some(data));
        assert!(decision.allowed, "{decision:?}");
        assert!(decision.side_effects.last().unwrap().starts_with(
            "UPDATE configmaps/rollout-operator-zone-tracker-mimir in strata-system: ingester-zone-a="
        ));
    }
    // A recent entry denies with the anchor's message; a malformed one too.
    let denied = decide_with(Some(vec![(
        "ingester-zone-b",
        r#"{"lastDownscaled":"2026-01-01T11:50:00Z"}"#,
    )]));
    assert!(!denied.allowed);
    assert_eq!(
        denied.message.unwrap(),
        format!(
            "{prefix}statefulset ingester-zone-b was downscaled at 2026-01-01 11:50:00 +0000 UTC and is labelled to wait 30m0s between zone downscales"
        )
    );
    let malformed = decide_with(Some(vec![("ingester-zone-b", "yesterday")]));
    assert_eq!(
        malformed.message.unwrap(),
        format!("{prefix}parsing parsing downscale timestamps from the zone ConfigMap failed.")
    );
}

/// One copy of the rules: every spec case gets the same verdict from the webhook and from the
/// layer-controller's own gate (Invalid or Cycle there ⇔ denied here).
#[test]
fn addonslayer_validation_agrees_with_the_controller() {
    use core_layers::crd::AddonsLayer;
    use core_layers::plan::{self, Gate, GateInputs, SourceState};
    let cases: Vec<(&str, Value)> = vec![
        ("valid", layer("apps", &[], json!({}))),
        (
            "valid with a dependency outside the cycle",
            layer("apps", &["other@>=1.2,<2"], json!({})),
        ),
        (
            "Kraan's plural.group source kind",
            layer(
                "apps",
                &[],
                json!({"source": {"kind": "gitrepositories.source.toolkit.fluxcd.io", "name": "r", "path": "./x"}}),
            ),
        ),
        (
            "ConfigMap source",
            layer(
                "apps",
                &[],
                json!({"source": {"kind": "ConfigMap", "name": "r", "path": "./"}}),
            ),
        ),
        (
            "unknown source kind",
            layer(
                "apps",
                &[],
                json!({"source": {"kind": "HelmRepository", "name": "r", "path": "./x"}}),
            ),
        ),
        (
            "path escaping the source",
            layer(
                "apps",
                &[],
                json!({"source": {"name": "r", "path": "./a/../../etc"}}),
            ),
        ),
        (
            "path without ./",
            layer("apps", &[], json!({"source": {"name": "r", "path": "x"}})),
        ),
        (
            "zero interval",
            layer("apps", &[], json!({"interval": "0s"})),
        ),
        (
            "bad timeout",
            layer("apps", &[], json!({"timeout": "soon"})),
        ),
        (
            "bad k8s version",
            layer("apps", &[], json!({"prereqs": {"k8sVersion": "latest"}})),
        ),
        ("bad dependency", layer("apps", &["base@>=x"], json!({}))),
        ("self dependency", layer("apps", &["apps"], json!({}))),
        ("cycle", layer("apps", &["base"], json!({}))),
        (
            "bad drift path",
            layer(
                "apps",
                &[],
                json!({"drift": {"observe": [{"paths": ["a..b"]}]}}),
            ),
        ),
        (
            "bad drift window",
            layer(
                "apps",
                &[],
                json!({"drift": {"fight": {"window": "later"}}}),
            ),
        ),
    ];
    let others = vec![
        layer("base", &["bootstrap"], json!({})),
        layer("bootstrap", &["apps"], json!({})),
    ];
    let typed = |v: &Value| -> AddonsLayer { serde_json::from_value(v.clone()).unwrap() };
    for (case, object) in cases {
        let (response, _) = run(
            Webhook::AddonsLayerValidation,
            layer_review(object.clone()),
            others.clone(),
        );
        let admitted = response["allowed"] == true;
        let this = typed(&object);
        let mut all: core_layers::crd::LayerSet = others
            .iter()
            .map(|o| {
                (
                    o["metadata"]["name"].as_str().unwrap().to_string(),
                    std::sync::Arc::new(typed(o)),
                )
            })
            .collect();
        all.insert("apps".into(), std::sync::Arc::new(this.clone()));
        let ready = SourceState::Ready {
            revision: "r1".into(),
        };
        let inputs = GateInputs {
            source: &ready,
            cluster_version: Some("v1.34.4"),
            default_source_namespace: "ns",
            objects: &[],
            shard: None,
        };
        let gate = plan::gate(&this, &all, &inputs);
        let mut refused = matches!(gate, Gate::Invalid(_) | Gate::Cycle(_));
        if let Some(drift) = &this.spec.drift {
            // spec.drift is the drift-observer's: it refuses what its rules refuse.
            refused |= !core_drift::rules::spec_errors(drift).is_empty();
        }
        assert_eq!(
            admitted, !refused,
            "{case}: webhook {response}, controller {gate:?}"
        );
    }
}

/// (code, message, reason) of an eviction decided with the anchor's reason label.
fn evict_with_reason(pod: &str, state: Vec<Value>) -> (Option<u16>, Option<String>, &'static str) {
    let body = serde_json::to_vec(&eviction(pod, "CREATE", "eviction")).unwrap();
    let review = Review::parse(&body).unwrap();
    let cluster = Cluster::new(
        Observed::from_documents("state", state.into_iter().enumerate().collect()).unwrap(),
    );
    let (decision, reason) =
        core_admission::webhooks::pod_eviction_with_reason(&review, &cluster, NOW.parse().unwrap());
    (decision.code, decision.message, reason)
}

#[test]
fn eviction_owner_errors_and_reasons_are_the_anchors() {
    // A pod owned by something else than a StatefulSet.
    let mut state = zones(&[]);
    let pod = state
        .iter_mut()
        .find(|o| o["metadata"]["name"] == "ingester-zone-a-0")
        .unwrap();
    pod["metadata"]["ownerReferences"][0]["kind"] = json!("ReplicaSet");
    pod["metadata"]["ownerReferences"][0]["name"] = json!("ingester-7d9");
    assert_eq!(
        evict_with_reason("ingester-zone-a-0", state),
        (
            Some(500),
            Some(
                "pod owner is not a StatefulSet - ingester-zone-a-0 has owner ingester-7d9 (ReplicaSet)"
                    .into()
            ),
            "sts-no-found"
        )
    );
    // Its StatefulSet is gone.
    let state: Vec<Value> = zones(&[])
        .into_iter()
        .filter(|o| !(o["kind"] == "StatefulSet" && o["metadata"]["name"] == "ingester-zone-a"))
        .collect();
    assert_eq!(
        evict_with_reason("ingester-zone-a-0", state),
        (
            Some(500),
            Some(
                "unable to find StatefulSet ingester-zone-a by name: statefulsets.apps \"ingester-zone-a\" not found"
                    .into()
            ),
            "sts-no-found"
        )
    );
    assert_eq!(
        evict_with_reason("ingester-zone-a-0", zones(&[])),
        (None, None, "allowed")
    );
    assert_eq!(
        evict_with_reason("ingester-zone-a-0", zones(&[("b", 1)])).2,
        "denied"
    );
    assert_eq!(
        evict_with_reason("nobody", zones(&[])),
        (
            Some(400),
            Some("pods \"nobody\" not found".into()),
            "pod-not-found"
        )
    );
    let out_of_scope = with_zpdb_spec(
        zones(&[]),
        json!({"maxUnavailable": 1, "selector": {"matchLabels": {"rollout-group": "store"}}}),
    );
    assert_eq!(
        evict_with_reason("ingester-zone-a-0", out_of_scope).2,
        "pod-not-in-scope"
    );
}

/// The author of a layer must be allowed to act as the account it names: the decision takes
/// the API server's answer (a SubjectAccessReview the server makes), and offline lists the
/// question instead of guessing. Metadata-only updates (the controllers' finalizer, the heal
/// annotation) ask nothing.
#[test]
fn addonslayer_validation_asks_whether_the_author_may_be_the_account() {
    use core_admission::webhooks::{Impersonation, LayerDefaults};
    let named = layer(
        "apps",
        &[],
        json!({"serviceAccountName": "kustomize-controller", "source": {"name": "repo", "namespace": "flux-system", "path": "./"}}),
    );
    let mut review = layer_review(named.clone());
    review["request"]["userInfo"] = json!({"username": "alice", "groups": ["team-a"]});
    let decide_with = |review: &Value, answer: Option<Impersonation>, defaults: LayerDefaults| {
        let mut cluster = Cluster::new(Observed::default());
        cluster.impersonation = answer;
        cluster.layer_defaults = defaults;
        let review = Review::parse(&serde_json::to_vec(review).unwrap()).unwrap();
        decide(
            Webhook::AddonsLayerValidation,
            &review,
            &cluster,
            NOW.parse::<Timestamp>().unwrap(),
        )
    };
    let refused = decide_with(
        &review,
        Some(Impersonation {
            allowed: false,
            reason: String::new(),
        }),
        LayerDefaults::default(),
    );
    assert!(!refused.allowed);
    assert_eq!(refused.code, Some(403));
    assert_eq!(
        refused.message.as_deref(),
        Some(
            "AddonsLayer apps: user \"alice\" may not act as ServiceAccount flux-system/kustomize-controller (spec.serviceAccountName): it lacks \"impersonate\" on serviceaccounts \"kustomize-controller\" in namespace \"flux-system\""
        )
    );
    let allowed = Impersonation {
        allowed: true,
        reason: String::new(),
    };
    assert!(decide_with(&review, Some(allowed.clone()), LayerDefaults::default()).allowed);
    // Offline: allowed, the question listed.
    let offline = decide_with(&review, None, LayerDefaults::default());
    assert!(offline.allowed);
    assert_eq!(
        offline.side_effects,
        vec![
            "SubjectAccessReview: may user \"alice\" impersonate serviceaccounts \"kustomize-controller\" in namespace \"flux-system\""
        ]
    );
    // No account named and no default: the layer acts as the controller. A server not told
    // which account that is has nothing to ask...
    let mut plain = layer_review(layer("apps", &[], json!({})));
    plain["request"]["userInfo"] = json!({"username": "alice"});
    let refusing = Some(Impersonation {
        allowed: false,
        reason: String::new(),
    });
    assert!(decide_with(&plain, refusing.clone(), LayerDefaults::default()).allowed);
    // ...one that is (the chart's default) asks whether the author may be the controller.
    let with_controller = LayerDefaults {
        controller_account: Some(
            core_admission::webhooks::parse_controller_account("strata-system/layer-controller")
                .unwrap(),
        ),
        ..LayerDefaults::default()
    };
    assert_eq!(
        decide_with(&plain, refusing.clone(), with_controller.clone())
            .message
            .as_deref(),
        Some(
            "AddonsLayer apps: user \"alice\" may not act as ServiceAccount strata-system/layer-controller (the layer-controller's own account: the layer names no spec.serviceAccountName): it lacks \"impersonate\" on serviceaccounts \"layer-controller\" in namespace \"strata-system\""
        )
    );
    assert!(decide_with(&plain, Some(allowed.clone()), with_controller.clone()).allowed);
    // An update that drops the account changes who the layer acts as: asked again.
    let mut dropped = plain.clone();
    dropped["request"]["operation"] = json!("UPDATE");
    dropped["request"]["oldObject"] = named.clone();
    assert!(!decide_with(&dropped, refusing.clone(), with_controller.clone()).allowed);
    // ...but with the controller's default account, the author must be allowed to be it.
    let locked_down = LayerDefaults {
        source_namespace: "team-a".into(),
        service_account: Some("tenant".into()),
        ..with_controller
    };
    let message = decide_with(&plain, refusing.clone(), locked_down)
        .message
        .unwrap_or_default();
    assert!(
        message.contains(
            "ServiceAccount team-a/tenant (the layer-controller's default service account)"
        ),
        "{message}"
    );
    // An update that leaves the spec alone (a finalizer, an annotation) asks nothing.
    let mut finalized = review.clone();
    finalized["request"]["operation"] = json!("UPDATE");
    finalized["request"]["oldObject"] = named;
    finalized["request"]["object"]["metadata"]["finalizers"] = json!(["strata.dev/teardown"]);
    assert!(decide_with(&finalized, refusing.clone(), LayerDefaults::default()).allowed);
    // One that changes it asks again.
    finalized["request"]["object"]["spec"]["version"] = json!("1.1.0");
    assert!(!decide_with(&finalized, refusing, LayerDefaults::default()).allowed);
}

/// `--layer-controller-service-account` is `<namespace>/<name>`; anything else is refused
/// naming what was given.
#[test]
fn the_controller_account_flag_is_namespace_slash_name() {
    use core_admission::webhooks::parse_controller_account;
    for (value, want) in [
        (
            "strata-system/layer-controller",
            Some(("strata-system", "layer-controller")),
        ),
        ("layer-controller", None),
        ("/layer-controller", None),
        ("strata-system/", None),
        ("a/b/c", None),
        ("", None),
    ] {
        match (parse_controller_account(value), want) {
            (Ok(account), Some((namespace, name))) => {
                assert_eq!(
                    (account.namespace.as_str(), account.name.as_str()),
                    (namespace, name)
                );
                assert!(!account.from_spec);
            }
            (Err(message), None) => assert!(
                message.starts_with(&format!("{value:?} is not <namespace>/<name>")),
                "{message}"
            ),
            (got, want) => panic!("{value:?}: got {got:?}, want {want:?}"),
        }
    }
}

/// The zone tracker of the server's own namespace keeps the flag's name (the anchor's
/// one-namespace install); every other namespace's is its own ConfigMap beside it.
#[test]
fn each_namespace_is_tracked_in_its_own_config_map_in_the_servers_namespace() {
    let place = ZoneTrackerPlace {
        namespace: "mimir".into(),
        name: "rollout-operator-zone-tracker".into(),
    };
    for (namespace, expected) in [
        ("mimir", "rollout-operator-zone-tracker"),
        ("loki", "rollout-operator-zone-tracker-loki"),
        ("tempo-prod", "rollout-operator-zone-tracker-tempo-prod"),
    ] {
        assert_eq!(place.config_map_for(namespace), expected, "{namespace}");
    }
}
