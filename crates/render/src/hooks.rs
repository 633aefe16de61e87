//! Helm hooks → the GitOps tool's equivalent, with a note for everything that has none.
//!
//! Argo CD maps Helm's annotations by itself, but silently: converting explicitly puts the
//! result in the reviewed diff, and the notes say what a reader loses (rollback and test hooks,
//! install/upgrade becoming "every sync", version needs of the delete hooks). Helm's own
//! annotations are kept so the objects can go back to Helm; Argo CD ignores them once an
//! `argocd.argoproj.io/hook` is present.

use serde_json::{Map, Value};

use crate::keys::{
    ARGO_HOOK, ARGO_HOOK_DELETE_POLICY, ARGO_SYNC_OPTIONS, ARGO_SYNC_WAVE, FLUX_PRUNE, HELM_HOOK,
    HELM_HOOK_DELETE_POLICY, HELM_HOOK_DELETE_TIMEOUT, HELM_HOOK_OUTPUT_LOG_POLICY,
    HELM_HOOK_WEIGHT, HELM_RESOURCE_POLICY,
};
use crate::split::{kind_of, name_of};

/// What the tool does with hooks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HookTarget {
    /// Argo CD hooks, waves and delete policies.
    Argocd,
    /// Tools without hooks (Flux, the layer-controller): install/upgrade hooks become ordinary
    /// objects, delete, rollback and test hooks are dropped.
    Plain,
    /// Flux: as `Plain`, and `resource-policy: keep` becomes Flux's prune opt-out.
    Flux,
}

/// The Argo CD phase of a Helm hook event, `None` when Argo CD has no equivalent.
pub fn argo_phase(event: &str) -> Option<&'static str> {
    match event {
        "pre-install" | "pre-upgrade" => Some("PreSync"),
        "post-install" | "post-upgrade" => Some("PostSync"),
        "pre-delete" => Some("PreDelete"),
        "post-delete" => Some("PostDelete"),
        _ => None,
    }
}

/// The Argo CD delete policy of a Helm one.
pub fn argo_delete_policy(policy: &str) -> Option<&'static str> {
    match policy {
        "before-hook-creation" => Some("BeforeHookCreation"),
        "hook-succeeded" => Some("HookSucceeded"),
        "hook-failed" => Some("HookFailed"),
        _ => None,
    }
}

/// The outcome for one object: keep it (possibly changed) or drop it, and the notes to print.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Conversion {
    pub keep: bool,
    pub notes: Vec<String>,
}

fn split_list(text: &str) -> Vec<String> {
    text.split(',')
        .map(|s| s.trim().to_ascii_lowercase())
        .filter(|s| !s.is_empty())
        .collect()
}

fn annotation<'a>(annotations: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    annotations.get(key).and_then(Value::as_str)
}

/// Converts the hook annotations of one object in place for `target`.
pub fn convert(object: &mut Value, target: HookTarget) -> Conversion {
    let what = format!(
        "{}/{}",
        kind_of(object),
        name_of(object).unwrap_or_default()
    );
    let Some(annotations) = object
        .get_mut("metadata")
        .and_then(|m| m.get_mut("annotations"))
        .and_then(Value::as_object_mut)
    else {
        return Conversion {
            keep: true,
            notes: Vec::new(),
        };
    };
    let mut notes = Vec::new();
    let mut note = |message: String| notes.push(format!("{what}: {message}"));
    if annotation(annotations, HELM_RESOURCE_POLICY) == Some("keep") {
        match target {
            HookTarget::Argocd => add_sync_option(annotations, "Delete=false"),
            HookTarget::Flux => {
                annotations.insert(FLUX_PRUNE.into(), Value::String("disabled".into()));
            }
            HookTarget::Plain => note(
                "helm.sh/resource-policy: keep has no layer-controller equivalent; the object is pruned when it leaves the layer".into(),
            ),
        }
    }
    let Some(hook) = annotation(annotations, HELM_HOOK).map(str::to_string) else {
        return Conversion { keep: true, notes };
    };
    let events = split_list(&hook);
    if target == HookTarget::Argocd && annotations.contains_key(ARGO_HOOK) {
        note(
            "already carries an Argo CD hook; its Helm hook annotations are left as they are"
                .into(),
        );
        return Conversion { keep: true, notes };
    }
    let keep = match target {
        HookTarget::Argocd => convert_argo(annotations, &events, &mut note),
        HookTarget::Plain | HookTarget::Flux => convert_plain(&events, &mut note),
    };
    Conversion { keep, notes }
}

fn convert_argo(
    annotations: &mut Map<String, Value>,
    events: &[String],
    note: &mut dyn FnMut(String),
) -> bool {
    let mut phases: Vec<&str> = Vec::new();
    for event in events {
        match argo_phase(event) {
            Some(phase) => {
                if !phases.contains(&phase) {
                    phases.push(phase);
                }
            }
            None => note(format!(
                "helm hook {event:?} has no Argo CD equivalent and is left out"
            )),
        }
    }
    if phases.is_empty() {
        note("dropped: none of its hook events runs under Argo CD".into());
        return false;
    }
    let has = |e: &str| events.iter().any(|x| x == e);
    if has("pre-install") != has("pre-upgrade") || has("post-install") != has("post-upgrade") {
        note("Argo CD cannot tell install from upgrade: this hook runs on every sync".into());
    }
    if phases.contains(&"PreDelete") {
        note("PreDelete hooks need Argo CD v3.3 or later".into());
    }
    if phases.contains(&"PostDelete") {
        note("PostDelete hooks need Argo CD v2.10 or later".into());
    }
    annotations.insert(ARGO_HOOK.into(), Value::String(phases.join(",")));
    if let Some(weight) = annotation(annotations, HELM_HOOK_WEIGHT).map(str::trim) {
        match weight.parse::<i64>() {
            Ok(w) => {
                annotations.insert(ARGO_SYNC_WAVE.into(), Value::String(w.to_string()));
            }
            Err(_) => note(format!(
                "helm.sh/hook-weight {weight:?} is not an integer and is left out"
            )),
        }
    }
    // Helm's default policy; writing it keeps the reviewed file explicit.
    let policies = annotation(annotations, HELM_HOOK_DELETE_POLICY)
        .map(split_list)
        .unwrap_or_else(|| vec!["before-hook-creation".into()]);
    let mut mapped: Vec<&str> = Vec::new();
    for policy in &policies {
        match argo_delete_policy(policy) {
            Some(p) if !mapped.contains(&p) => mapped.push(p),
            Some(_) => {}
            None => note(format!(
                "helm delete policy {policy:?} has no Argo CD equivalent and is left out"
            )),
        }
    }
    if !mapped.is_empty() {
        annotations.insert(
            ARGO_HOOK_DELETE_POLICY.into(),
            Value::String(mapped.join(",")),
        );
    }
    if annotations.contains_key(HELM_HOOK_DELETE_TIMEOUT) {
        note("helm.sh/hook-delete-timeout has no Argo CD equivalent".into());
    }
    if annotations.contains_key(HELM_HOOK_OUTPUT_LOG_POLICY) {
        note("helm.sh/hook-output-log-policy has no Argo CD equivalent".into());
    }
    true
}

fn convert_plain(events: &[String], note: &mut dyn FnMut(String)) -> bool {
    let install = events.iter().any(|e| {
        matches!(
            e.as_str(),
            "pre-install" | "post-install" | "pre-upgrade" | "post-upgrade"
        )
    });
    if install {
        note(format!(
            "helm hook {:?} becomes an ordinary object: no ordering, run once, never deleted by policy",
            events.join(",")
        ));
        true
    } else {
        note(format!(
            "dropped: helm hook {:?} has no equivalent without hooks",
            events.join(",")
        ));
        false
    }
}

fn add_sync_option(annotations: &mut Map<String, Value>, option: &str) {
    let existing = annotation(annotations, ARGO_SYNC_OPTIONS).unwrap_or_default();
    let mut options: Vec<&str> = existing
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    if !options.contains(&option) {
        options.push(option);
    }
    let joined = options.join(",");
    annotations.insert(ARGO_SYNC_OPTIONS.into(), Value::String(joined));
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use serde_json::json;

    fn job(annotations: Value) -> Value {
        json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "annotations": annotations}})
    }

    /// (case, helm annotations, target, kept, argo annotations wanted, note fragments)
    #[test]
    fn argo_mapping_table() {
        type Case<'a> = (&'a str, Value, bool, Value, &'a [&'a str]);
        let cases: Vec<Case> = vec![
            (
                "pre-install and pre-upgrade",
                json!({"helm.sh/hook": "pre-install,pre-upgrade", "helm.sh/hook-weight": "-5"}),
                true,
                json!({"argocd.argoproj.io/hook": "PreSync", "argocd.argoproj.io/sync-wave": "-5", "argocd.argoproj.io/hook-delete-policy": "BeforeHookCreation"}),
                &[],
            ),
            (
                "post-install only",
                json!({"helm.sh/hook": "post-install", "helm.sh/hook-delete-policy": "hook-succeeded,hook-failed"}),
                true,
                json!({"argocd.argoproj.io/hook": "PostSync", "argocd.argoproj.io/hook-delete-policy": "HookSucceeded,HookFailed"}),
                &["runs on every sync"],
            ),
            (
                "post-upgrade",
                json!({"helm.sh/hook": "post-upgrade"}),
                true,
                json!({"argocd.argoproj.io/hook": "PostSync"}),
                &["runs on every sync"],
            ),
            (
                "pre-delete",
                json!({"helm.sh/hook": "pre-delete"}),
                true,
                json!({"argocd.argoproj.io/hook": "PreDelete"}),
                &["v3.3"],
            ),
            (
                "post-delete",
                json!({"helm.sh/hook": "post-delete", "helm.sh/hook-delete-timeout": "30"}),
                true,
                json!({"argocd.argoproj.io/hook": "PostDelete"}),
                &["v2.10", "hook-delete-timeout has no Argo CD equivalent"],
            ),
            (
                "rollback only is dropped",
                json!({"helm.sh/hook": "pre-rollback,post-rollback"}),
                false,
                json!({}),
                &[
                    "\"pre-rollback\" has no Argo CD equivalent",
                    "\"post-rollback\"",
                    "dropped",
                ],
            ),
            (
                "test is dropped",
                json!({"helm.sh/hook": "test"}),
                false,
                json!({}),
                &["dropped"],
            ),
            (
                "mixed keeps the mapped part",
                json!({"helm.sh/hook": "pre-install, pre-upgrade, pre-rollback", "helm.sh/hook-output-log-policy": "hook-failed"}),
                true,
                json!({"argocd.argoproj.io/hook": "PreSync"}),
                &["\"pre-rollback\"", "hook-output-log-policy"],
            ),
            (
                "bad weight and unknown policy",
                json!({"helm.sh/hook": "pre-install,pre-upgrade", "helm.sh/hook-weight": "x", "helm.sh/hook-delete-policy": "never"}),
                true,
                json!({"argocd.argoproj.io/hook": "PreSync"}),
                &["hook-weight \"x\"", "policy \"never\""],
            ),
            (
                "resource-policy keep",
                json!({"helm.sh/resource-policy": "keep", "argocd.argoproj.io/sync-options": "Replace=true"}),
                true,
                json!({"argocd.argoproj.io/sync-options": "Replace=true,Delete=false"}),
                &[],
            ),
            (
                "an Argo hook wins",
                json!({"helm.sh/hook": "post-install", "argocd.argoproj.io/hook": "Sync"}),
                true,
                json!({"argocd.argoproj.io/hook": "Sync"}),
                &["already carries"],
            ),
        ];
        for (name, helm, keep, want, fragments) in cases {
            let mut object = job(helm);
            let conversion = convert(&mut object, HookTarget::Argocd);
            assert_eq!(conversion.keep, keep, "{name}");
            let annotations = object["metadata"]["annotations"].as_object().unwrap();
            for (key, value) in want.as_object().unwrap() {
                assert_eq!(annotations.get(key), Some(value), "{name}: {key}");
            }
            for fragment in fragments {
                assert!(
                    conversion.notes.iter().any(|n| n.contains(fragment)),
                    "{name}: no note with {fragment:?} in {:?}",
                    conversion.notes
                );
            }
            assert!(
                conversion.notes.iter().all(|n| n.starts_with("Job/j: ")),
                "{name}"
            );
            if fragments.is_empty() {
                assert!(
                    conversion.notes.is_empty(),
                    "{name}: {:?}",
                    conversion.notes
                );
            }
        }
    }

    #[test]
    fn without_hooks() {
        let cases = [
            ("pre-install", HookTarget::Plain, true),
            ("post-upgrade", HookTarget::Flux, true),
            ("pre-delete", HookTarget::Plain, false),
            ("post-rollback", HookTarget::Flux, false),
        ];
        for (hook, target, keep) in cases {
            let mut object = job(json!({"helm.sh/hook": hook}));
            let conversion = convert(&mut object, target);
            assert_eq!(conversion.keep, keep, "{hook}");
            assert_eq!(conversion.notes.len(), 1, "{hook}");
            assert!(object["metadata"]["annotations"].get(ARGO_HOOK).is_none());
        }
        let mut object = job(json!({"helm.sh/resource-policy": "keep"}));
        convert(&mut object, HookTarget::Flux);
        assert_eq!(object["metadata"]["annotations"][FLUX_PRUNE], "disabled");
    }

    #[test]
    fn no_annotations_is_untouched() {
        let mut object =
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}});
        let before = object.clone();
        assert!(convert(&mut object, HookTarget::Argocd).keep);
        assert_eq!(object, before);
    }
}
