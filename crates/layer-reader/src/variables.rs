//! A layer's variables read from the cluster (`spec.postBuild.substituteFrom`), as its own
//! account may read them; the substitution itself is core-layers' (`substitute`).

use std::collections::{BTreeMap, BTreeSet};

use core_layers::crd::AddonsLayer;
use core_layers::error::LayerError;
use core_layers::objects::SourceRef;
use core_layers::substitute::{clean_value, valid_name};

/// The variables of a layer (`spec.postBuild`), as Flux merges them: every `substituteFrom`
/// ConfigMap's data and Secret's decoded data in list order (a later one wins), then
/// `substitute` over all of them. The objects are read in the layer's source namespace with
/// `client` (the layer's own access, so a layer reads only what its account may). A missing
/// object fails the layer unless marked `optional`; an invalid variable name fails it too.
/// Empty: the layer substitutes nothing.
pub async fn layer_variables(
    client: &kube::Client,
    layer: &AddonsLayer,
    default_namespace: &str,
) -> Result<BTreeMap<String, String>, LayerError> {
    read_variables(client, layer, default_namespace)
        .await
        .map(|v| v.values)
}

/// A layer's variables, and which of them came from a Secret.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Variables {
    pub values: BTreeMap<String, String>,
    /// Names whose value was read from a `substituteFrom` Secret (and not replaced by an
    /// inline `substitute` value): such values are never shown in a status, Event or log.
    pub from_secrets: BTreeSet<String>,
}

impl Variables {
    /// The non-empty values read from Secrets.
    pub fn secret_values(&self) -> Vec<String> {
        let mut values: Vec<String> = self
            .from_secrets
            .iter()
            .filter_map(|name| self.values.get(name))
            .filter(|value| !value.is_empty())
            .cloned()
            .collect();
        values.sort();
        values.dedup();
        values
    }
}

/// [`layer_variables`], marking the values that came from Secrets.
pub async fn read_variables(
    client: &kube::Client,
    layer: &AddonsLayer,
    default_namespace: &str,
) -> Result<Variables, LayerError> {
    use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    let Some(post_build) = &layer.spec.post_build else {
        return Ok(Variables::default());
    };
    let namespace = SourceRef::of(layer, default_namespace).namespace;
    let mut vars = BTreeMap::new();
    let mut from_secrets = BTreeSet::new();
    let add = |vars: &mut BTreeMap<String, String>, from: &str, key: &str, value: &str| {
        if !valid_name(key) {
            return Err(LayerError::Substitution(format!(
                "{from}: variable name {key:?} is invalid: names match [_A-Za-z][_A-Za-z0-9]*"
            )));
        }
        vars.insert(key.to_string(), clean_value(value));
        Ok(())
    };
    for (i, reference) in post_build.substitute_from.iter().enumerate() {
        let from = format!(
            "spec.postBuild.substituteFrom[{i}] ({} {namespace}/{})",
            reference.kind, reference.name
        );
        let missing = || {
            LayerError::Substitution(format!(
                "{from} does not exist (mark it optional: true if it may be missing)"
            ))
        };
        let read = |e: kube::Error| LayerError::api(format!("reading {from}"), e);
        match reference.kind.as_str() {
            "ConfigMap" => {
                let api: kube::Api<ConfigMap> = kube::Api::namespaced(client.clone(), &namespace);
                match api.get_opt(&reference.name).await.map_err(read)? {
                    Some(found) => {
                        for (key, value) in found.data.unwrap_or_default() {
                            add(&mut vars, &from, &key, &value)?;
                            from_secrets.remove(&key);
                        }
                    }
                    None if reference.optional => {}
                    None => return Err(missing()),
                }
            }
            "Secret" => {
                let api: kube::Api<Secret> = kube::Api::namespaced(client.clone(), &namespace);
                match api.get_opt(&reference.name).await.map_err(read)? {
                    Some(found) => {
                        for (key, value) in found.data.unwrap_or_default() {
                            let text = String::from_utf8(value.0).map_err(|_| {
                                LayerError::Substitution(format!(
                                    "{from}: the value of {key:?} is not UTF-8 text"
                                ))
                            })?;
                            add(&mut vars, &from, &key, &text)?;
                            from_secrets.insert(key);
                        }
                        for (key, value) in found.string_data.unwrap_or_default() {
                            add(&mut vars, &from, &key, &value)?;
                            from_secrets.insert(key);
                        }
                    }
                    None if reference.optional => {}
                    None => return Err(missing()),
                }
            }
            other => {
                return Err(LayerError::Substitution(format!(
                    "spec.postBuild.substituteFrom[{i}].kind {other:?} is not ConfigMap or Secret"
                )));
            }
        }
    }
    for (key, value) in &post_build.substitute {
        add(&mut vars, "spec.postBuild.substitute", key, value)?;
        from_secrets.remove(key);
    }
    Ok(Variables {
        values: vars,
        from_secrets,
    })
}
