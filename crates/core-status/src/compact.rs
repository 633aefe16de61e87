//! A compact, status-only representation of an object, decoded straight from JSON.
//!
//! Computing a status reads a few dozen fields (see [`Fields`]). Decoding everything else —
//! pod templates, labels, `managedFields`, `data` — into a tree of maps costs far more than
//! the rules, and walking scattered trees makes large sets memory-bound. [`Compact`] keeps only
//! those fields, inline and borrowed from the input text where it can, and skips the rest while
//! parsing without allocating.
//!
//! Exactness: kstatus reports wrongly typed fields as errors with precise messages. Rather than
//! reproduce every such message twice, the decoder notes any irregular shape on a strictly read
//! field (a non-integer `generation`, a `conditions` entry that is not a map, ...) and
//! [`Observed::from_json`] decodes such an object in full instead, so the result is always the
//! one [`crate::evaluate`] gives for the full object. Custom health expressions and the opt-in
//! policies read arbitrary fields: they need the full object.

use std::borrow::Cow;
use std::fmt;

use jiff::Timestamp;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use crate::compute::{Evaluation, evaluate, evaluate_fields};
use crate::error::StatusError;
use crate::object::{Counter, Fields, ObservedCondition, Text};
use crate::policy::{PolicyCondition, PolicyFields};

/// The status-relevant fields of one object (see the module docs).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Compact<'a> {
    api_version: Cow<'a, str>,
    kind: Cow<'a, str>,
    name: Cow<'a, str>,
    namespace: Cow<'a, str>,
    generation: Option<i64>,
    deletion_timestamp: Option<Cow<'a, str>>,
    observed_generation: Option<i64>,
    /// Counter values; a bit in `present` says which were integers (keeps the struct small).
    counters: [i64; Counter::COUNT],
    present: u32,
    texts: [Option<Cow<'a, str>>; Text::COUNT],
    suspend: Option<bool>,
    conditions: Vec<ConditionFields<'a>>,
    /// What few objects have, out of line.
    rare: Option<Box<Rare<'a>>>,
    /// `status.loadBalancer.ingress` is a non-empty list.
    load_balancer_ingress: bool,
    /// `status` is a map with at least one entry.
    status_nonempty: bool,
    /// `metadata.ownerReferences` has an entry with `controller: true`.
    controlled: bool,
    /// A strictly read field had a shape the rules would report as an error.
    irregular: bool,
}

/// Fields few objects have, kept behind one pointer: large inputs hold many objects at once,
/// and every inline byte of [`Compact`] is paid by each of them.
#[derive(Clone, Debug, Default, PartialEq)]
struct Rare<'a> {
    /// Containers with a `state.waiting.reason`: whether an init container, its name (when
    /// a string), the reason.
    waiting: Vec<(bool, Option<Cow<'a, str>>, Cow<'a, str>)>,
    /// `metadata.managedFields`: whether the entry is a status-subresource write, its time.
    writes: Vec<(bool, Cow<'a, str>)>,
    /// `(index in conditions, its own observedGeneration)` for conditions that have one.
    condition_generations: Vec<(usize, i64)>,
}

/// An object ready for status computation: compact when its shape is regular, else in full.
// Almost every object is compact and lives inline in a Vec; boxing it would cost an allocation
// per object for the sake of the rare full one.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq)]
pub enum Observed<'a> {
    Compact(Compact<'a>),
    Full(Value),
}

impl<'a> Observed<'a> {
    /// Decodes one JSON object.
    pub fn from_json(text: &'a str) -> Result<Self, serde_json::Error> {
        let compact: Compact = serde_json::from_str(text)?;
        if compact.irregular {
            return Ok(Observed::Full(serde_json::from_str(text)?));
        }
        Ok(Observed::Compact(compact))
    }

    /// Decodes a JSON array of objects in one pass; the rare irregular ones are decoded again
    /// in full.
    pub fn many_from_json(text: &'a str) -> Result<Vec<Self>, serde_json::Error> {
        // Objects are rarely under 1 KiB of JSON: starting near the final size saves most of
        // the growth copies of a large list.
        let mut decoder = serde_json::Deserializer::from_str(text);
        let mut out = Many(text.len() / 1024).deserialize(&mut decoder)?;
        decoder.end()?;
        let mut full: Option<Vec<Value>> = None;
        for (i, item) in out.iter_mut().enumerate() {
            if matches!(item, Observed::Compact(c) if c.irregular) {
                let all = match &mut full {
                    Some(all) => all,
                    None => full.insert(serde_json::from_str(text)?),
                };
                *item = Observed::Full(std::mem::take(&mut all[i]));
            }
        }
        Ok(out)
    }

    /// The status, exactly as [`crate::evaluate`] computes it for the full object.
    pub fn evaluate(&self, now: Timestamp) -> Evaluation {
        match self {
            Observed::Compact(compact) => evaluate_fields(compact, now),
            Observed::Full(object) => evaluate(object, now),
        }
    }

    pub fn api_version(&self) -> &str {
        match self {
            Observed::Compact(c) => &c.api_version,
            Observed::Full(o) => crate::object::str_or(o, &["apiVersion"], ""),
        }
    }

    pub fn kind(&self) -> &str {
        match self {
            Observed::Compact(c) => &c.kind,
            Observed::Full(o) => crate::object::str_or(o, &["kind"], ""),
        }
    }

    pub fn name(&self) -> &str {
        match self {
            Observed::Compact(c) => &c.name,
            Observed::Full(o) => crate::object::str_or(o, &["metadata", "name"], ""),
        }
    }

    pub fn namespace(&self) -> &str {
        match self {
            Observed::Compact(c) => &c.namespace,
            Observed::Full(o) => crate::object::str_or(o, &["metadata", "namespace"], ""),
        }
    }
}

impl Compact<'_> {
    /// Whether `metadata.ownerReferences` names a controller (a pod some workload may own).
    pub fn is_controlled(&self) -> bool {
        self.controlled
    }

    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// Whether a strictly read field had a shape only the full decoder reports exactly.
    pub fn is_irregular(&self) -> bool {
        self.irregular
    }

    /// Sets apiVersion and kind where the object has none (items of a typed list).
    pub fn fill_type(&mut self, api_version: &str, kind: &str) {
        if self.api_version.is_empty() {
            self.api_version = Cow::Owned(api_version.to_string());
        }
        if self.kind.is_empty() {
            self.kind = Cow::Owned(kind.to_string());
        }
    }
}

impl Fields for Compact<'_> {
    fn api_version(&self) -> &str {
        &self.api_version
    }

    fn kind(&self) -> &str {
        &self.kind
    }

    fn deletion_timestamp(&self) -> Result<Option<&str>, StatusError> {
        Ok(self.deletion_timestamp.as_deref())
    }

    fn generation(&self) -> Result<Option<i64>, StatusError> {
        Ok(self.generation)
    }

    fn observed_generation(&self) -> Result<Option<i64>, StatusError> {
        Ok(self.observed_generation)
    }

    fn conditions(&self) -> Result<Vec<ObservedCondition<'_>>, StatusError> {
        Ok(self
            .conditions
            .iter()
            .map(|c| {
                let [type_, status, reason, message] = &c.text;
                ObservedCondition {
                    type_,
                    status,
                    reason,
                    message,
                }
            })
            .collect())
    }

    fn counter(&self, counter: Counter) -> Option<i64> {
        (self.present & (1 << counter as u32) != 0).then(|| self.counters[counter as usize])
    }

    fn text(&self, text: Text) -> Option<&str> {
        self.texts[text as usize].as_deref()
    }

    fn suspended(&self) -> bool {
        self.suspend == Some(true)
    }

    fn crash_looping(&self) -> Vec<&str> {
        self.rare
            .iter()
            .flat_map(|r| &r.waiting)
            .filter(|(init, _, reason)| !init && reason == "CrashLoopBackOff")
            .filter_map(|(_, name, _)| name.as_deref())
            .collect()
    }
}

impl PolicyFields for Compact<'_> {
    fn name(&self) -> &str {
        &self.name
    }

    fn policy_conditions(&self) -> Vec<PolicyCondition<'_>> {
        let generations = self.rare.iter().flat_map(|r| &r.condition_generations);
        self.conditions
            .iter()
            .enumerate()
            .map(|(i, c)| PolicyCondition {
                type_: &c.text[0],
                status: &c.text[1],
                reason: &c.text[2],
                message: c.message_is_text().then_some(&*c.text[3]),
                observed_generation: generations
                    .clone()
                    .find(|(at, _)| *at == i)
                    .map(|(_, g)| *g),
                last_transition_time: c.last_transition_time,
            })
            .collect()
    }

    fn waiting_containers(&self, init: bool, reasons: &[&str]) -> Vec<(&str, &str)> {
        self.rare
            .iter()
            .flat_map(|r| &r.waiting)
            .filter(|(i, _, reason)| *i == init && reasons.contains(&reason.as_ref()))
            .map(|(_, name, reason)| (name.as_deref().unwrap_or_default(), reason.as_ref()))
            .collect()
    }

    fn has_load_balancer_ingress(&self) -> bool {
        self.load_balancer_ingress
    }

    fn status_is_empty(&self) -> bool {
        !self.status_nonempty
    }

    fn last_write(&self, spec: bool) -> Option<Timestamp> {
        self.rare
            .iter()
            .flat_map(|r| &r.writes)
            .filter(|(status, _)| *status != spec)
            .filter_map(|(_, time)| time.parse().ok())
            .max()
    }
}

/// A list of objects decoded straight into their final place (no second move), with an
/// initial capacity.
pub(crate) struct Many(pub(crate) usize);

impl<'de> DeserializeSeed<'de> for Many {
    type Value = Vec<Observed<'de>>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for Many {
    type Value = Vec<Observed<'de>>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list of objects")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut out = Vec::with_capacity(self.0);
        while let Some(item) = seq.next_element::<Compact>()? {
            out.push(Observed::Compact(item));
        }
        Ok(out)
    }
}

/// A scalar as the rules see it; maps and lists are skipped without being built.
enum Scalar<'a> {
    Null,
    Bool(bool),
    Int(i64),
    Str(Cow<'a, str>),
    /// A float, an integer beyond i64, a map or a list.
    Other,
}

impl<'a> Scalar<'a> {
    fn int(self) -> Option<i64> {
        match self {
            Scalar::Int(v) => Some(v),
            _ => None,
        }
    }

    fn text(self) -> Option<Cow<'a, str>> {
        match self {
            Scalar::Str(s) => Some(s),
            _ => None,
        }
    }
}

impl<'de> de::Deserialize<'de> for Scalar<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ScalarVisitor)
    }
}

struct ScalarVisitor;

impl<'de> Visitor<'de> for ScalarVisitor {
    type Value = Scalar<'de>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Self::Value, E> {
        Ok(Scalar::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
        Ok(Scalar::Int(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Self::Value, E> {
        Ok(i64::try_from(v).map_or(Scalar::Other, Scalar::Int))
    }

    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(Scalar::Other)
    }

    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Scalar::Str(Cow::Borrowed(v)))
    }

    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Scalar::Str(Cow::Owned(v.to_owned())))
    }

    fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
        Ok(Scalar::Str(Cow::Owned(v)))
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(Scalar::Null)
    }

    fn visit_none<E>(self) -> Result<Self::Value, E> {
        Ok(Scalar::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        Checked.visit_seq(seq)?;
        Ok(Scalar::Other)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        Checked.visit_map(map)?;
        Ok(Scalar::Other)
    }
}

/// A map key, borrowed from the input unless it had escapes.
struct Key<'a>(Cow<'a, str>);

impl<'de> de::Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string key")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }
        }
        deserializer.deserialize_str(KeyVisitor)
    }
}

/// One map-shaped part of an object, decoding its entries into the [`Compact`].
trait Section<'de> {
    /// Decodes (or skips) the value of `key`; must consume it.
    fn entry<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error>;

    /// The part was not a map: `null` says whether it was null (usually the same as absent).
    fn not_a_map(&mut self, null: bool);
}

/// Decodes a value into a [`Section`].
struct Part<'s, S>(&'s mut S);

impl<'de, S: Section<'de>> DeserializeSeed<'de> for Part<'_, S> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de, S: Section<'de>> Visitor<'de> for Part<'_, S> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(Key(key)) = map.next_key::<Key>()? {
            self.0.entry(&key, &mut map)?;
        }
        Ok(())
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        self.0.not_a_map(true);
        Ok(())
    }

    fn visit_none<E>(self) -> Result<(), E> {
        self.0.not_a_map(true);
        Ok(())
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        self.0.not_a_map(false);
        Ok(())
    }

    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        self.0.not_a_map(false);
        Ok(())
    }

    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        self.0.not_a_map(false);
        Ok(())
    }

    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        self.0.not_a_map(false);
        Ok(())
    }

    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        self.0.not_a_map(false);
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<(), A::Error> {
        Checked.visit_seq(seq)?;
        self.0.not_a_map(false);
        Ok(())
    }
}

impl<'de> de::Deserialize<'de> for Compact<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let mut compact = Compact::default();
        Part(&mut compact).deserialize(deserializer)?;
        Ok(compact)
    }
}

/// Reads a value to its end and keeps nothing, checking it as strictly as decoding it into a
/// [`serde_json::Value`] would: numbers in range, escapes (lone surrogates), the nesting
/// limit. serde's `IgnoredAny` checks only the syntax, so a decoder that skips with it accepts
/// texts the full decoding refuses. Used wherever JSON is skipped rather than decoded (the
/// admission webhook's partial decoding of reviews).
#[derive(Clone, Copy, Debug)]
pub struct Checked;

impl<'de> DeserializeSeed<'de> for Checked {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Checked {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }

    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }

    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }

    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }

    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element_seed(Checked)?.is_some() {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while map.next_key_seed(Checked)?.is_some() {
            map.next_value_seed(Checked)?;
        }
        Ok(())
    }
}

fn skip<'de, A: MapAccess<'de>>(map: &mut A) -> Result<(), A::Error> {
    map.next_value_seed(Checked)
}

impl<'de> Compact<'de> {
    fn rare(&mut self) -> &mut Rare<'de> {
        self.rare.get_or_insert_with(Box::default)
    }

    fn set(&mut self, field: Lenient, value: Scalar<'de>) {
        match field {
            Lenient::Text(text) => self.texts[text as usize] = value.text(),
            Lenient::Count(counter) => match value.int() {
                Some(v) => {
                    self.counters[counter as usize] = v;
                    self.present |= 1 << counter as u32;
                }
                None => self.clear_counter(counter),
            },
        }
    }

    fn clear_counter(&mut self, counter: Counter) {
        self.present &= !(1 << counter as u32);
    }

    /// A strictly read integer: anything present but not an integer is irregular.
    fn strict_int(&mut self, value: Scalar<'de>) -> Option<i64> {
        match value {
            Scalar::Int(v) => Some(v),
            _ => {
                self.irregular = true;
                None
            }
        }
    }
}

/// The object's root. A repeated key replaces its part wholesale, as a decoded map would.
impl<'de> Section<'de> for Compact<'de> {
    fn entry<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        match key {
            "apiVersion" => {
                self.api_version = map.next_value::<Scalar>()?.text().unwrap_or_default()
            }
            "kind" => self.kind = map.next_value::<Scalar>()?.text().unwrap_or_default(),
            "metadata" => {
                self.name = Cow::Borrowed("");
                self.namespace = Cow::Borrowed("");
                self.generation = None;
                self.deletion_timestamp = None;
                self.texts[Text::CreationTimestamp as usize] = None;
                if let Some(rare) = &mut self.rare {
                    rare.writes.clear();
                }
                self.controlled = false;
                map.next_value_seed(Part(&mut Metadata(self)))?;
            }
            "spec" => {
                for counter in SPEC_COUNTERS {
                    self.clear_counter(counter);
                }
                for text in SPEC_TEXTS {
                    self.texts[text as usize] = None;
                }
                self.suspend = None;
                map.next_value_seed(Part(&mut Spec(self)))?;
            }
            "status" => {
                self.observed_generation = None;
                for counter in STATUS_COUNTERS {
                    self.clear_counter(counter);
                }
                for text in STATUS_TEXTS {
                    self.texts[text as usize] = None;
                }
                self.conditions.clear();
                if let Some(rare) = &mut self.rare {
                    rare.waiting.clear();
                    rare.condition_generations.clear();
                }
                self.load_balancer_ingress = false;
                self.status_nonempty = false;
                map.next_value_seed(Part(&mut Status(self)))?;
            }
            _ => skip(map)?,
        }
        Ok(())
    }

    fn not_a_map(&mut self, _: bool) {
        // Not an object at all: let the full decoder and the rules deal with it.
        self.irregular = true;
    }
}

/// A leniently read field: a counter (non-integers fall back) or a text (non-strings do).
#[derive(Clone, Copy)]
enum Lenient {
    Count(Counter),
    Text(Text),
}

const SPEC_TEXTS: [Text; 3] = [Text::UpdateStrategyType, Text::ServiceType, Text::ClusterIp];

const STATUS_TEXTS: [Text; 4] = [
    Text::Phase,
    Text::CurrentRevision,
    Text::UpdateRevision,
    Text::StartTime,
];

const SPEC_COUNTERS: [Counter; 5] = [
    Counter::SpecReplicas,
    Counter::ProgressDeadlineSeconds,
    Counter::Parallelism,
    Counter::Completions,
    Counter::Partition,
];

const STATUS_COUNTERS: [Counter; 15] = [
    Counter::Replicas,
    Counter::UpdatedReplicas,
    Counter::ReadyReplicas,
    Counter::AvailableReplicas,
    Counter::CurrentReplicas,
    Counter::DesiredNumberScheduled,
    Counter::CurrentNumberScheduled,
    Counter::UpdatedNumberScheduled,
    Counter::NumberAvailable,
    Counter::NumberReady,
    Counter::FullyLabeledReplicas,
    Counter::Succeeded,
    Counter::Active,
    Counter::Failed,
    Counter::Ready,
];

struct Metadata<'c, 'a>(&'c mut Compact<'a>);

impl<'de> Section<'de> for Metadata<'_, 'de> {
    fn entry<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        let c = &mut *self.0;
        match key {
            "name" => c.name = map.next_value::<Scalar>()?.text().unwrap_or_default(),
            "namespace" => c.namespace = map.next_value::<Scalar>()?.text().unwrap_or_default(),
            "generation" => {
                let value = map.next_value::<Scalar>()?;
                c.generation = c.strict_int(value);
            }
            "deletionTimestamp" => match map.next_value::<Scalar>()? {
                Scalar::Str(s) => c.deletion_timestamp = Some(s),
                _ => c.irregular = true,
            },
            "creationTimestamp" => {
                let value = map.next_value()?;
                c.set(Lenient::Text(Text::CreationTimestamp), value);
            }
            "managedFields" => {
                if let Some(rare) = &mut c.rare {
                    rare.writes.clear();
                }
                map.next_value_seed(List(&mut ManagedFields(c)))?;
            }
            "ownerReferences" => {
                let mut owners = Owners(false);
                map.next_value_seed(List(&mut owners))?;
                c.controlled = owners.0;
            }
            _ => skip(map)?,
        }
        Ok(())
    }

    fn not_a_map(&mut self, _: bool) {
        // Even null: input validation reports a null `metadata`, and only the full decoder
        // carries what it needs.
        self.0.irregular = true;
    }
}

struct Spec<'c, 'a>(&'c mut Compact<'a>);

impl<'de> Section<'de> for Spec<'_, 'de> {
    fn entry<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        let c = &mut *self.0;
        let field = match key {
            "replicas" => Lenient::Count(Counter::SpecReplicas),
            "progressDeadlineSeconds" => Lenient::Count(Counter::ProgressDeadlineSeconds),
            "parallelism" => Lenient::Count(Counter::Parallelism),
            "completions" => Lenient::Count(Counter::Completions),
            "type" => Lenient::Text(Text::ServiceType),
            "clusterIP" => Lenient::Text(Text::ClusterIp),
            "suspend" => {
                c.suspend = match map.next_value::<Scalar>()? {
                    Scalar::Bool(b) => Some(b),
                    _ => None,
                };
                return Ok(());
            }
            "updateStrategy" => {
                c.texts[Text::UpdateStrategyType as usize] = None;
                c.clear_counter(Counter::Partition);
                return map.next_value_seed(Part(&mut UpdateStrategy(c)));
            }
            _ => return skip(map),
        };
        let value = map.next_value()?;
        c.set(field, value);
        Ok(())
    }

    fn not_a_map(&mut self, _: bool) {
        // Lenient reads only: a non-map spec reads as empty.
    }
}

struct UpdateStrategy<'c, 'a>(&'c mut Compact<'a>);

impl<'de> Section<'de> for UpdateStrategy<'_, 'de> {
    fn entry<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        let c = &mut *self.0;
        match key {
            "type" => {
                let value = map.next_value()?;
                c.set(Lenient::Text(Text::UpdateStrategyType), value);
            }
            "rollingUpdate" => {
                c.clear_counter(Counter::Partition);
                map.next_value_seed(Part(&mut RollingUpdate(c)))?;
            }
            _ => skip(map)?,
        }
        Ok(())
    }

    fn not_a_map(&mut self, _: bool) {}
}

struct RollingUpdate<'c, 'a>(&'c mut Compact<'a>);

impl<'de> Section<'de> for RollingUpdate<'_, 'de> {
    fn entry<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        if key != "partition" {
            return skip(map);
        }
        let value = map.next_value()?;
        self.0.set(Lenient::Count(Counter::Partition), value);
        Ok(())
    }

    fn not_a_map(&mut self, _: bool) {}
}

struct Status<'c, 'a>(&'c mut Compact<'a>);

impl<'de> Section<'de> for Status<'_, 'de> {
    fn entry<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        let c = &mut *self.0;
        c.status_nonempty = true;
        let field = match key {
            "observedGeneration" => {
                let value = map.next_value::<Scalar>()?;
                c.observed_generation = c.strict_int(value);
                return Ok(());
            }
            "conditions" => {
                c.conditions.clear();
                if let Some(rare) = &mut c.rare {
                    rare.condition_generations.clear();
                }
                return map.next_value_seed(List(&mut ConditionList(c)));
            }
            "containerStatuses" => {
                if let Some(rare) = &mut c.rare {
                    rare.waiting.retain(|(init, _, _)| *init);
                }
                return map.next_value_seed(List(&mut ContainerStatuses { c, init: false }));
            }
            "initContainerStatuses" => {
                if let Some(rare) = &mut c.rare {
                    rare.waiting.retain(|(init, _, _)| !*init);
                }
                return map.next_value_seed(List(&mut ContainerStatuses { c, init: true }));
            }
            "loadBalancer" => {
                c.load_balancer_ingress = false;
                return map.next_value_seed(Part(&mut LoadBalancer(c)));
            }
            "phase" => Lenient::Text(Text::Phase),
            "currentRevision" => Lenient::Text(Text::CurrentRevision),
            "updateRevision" => Lenient::Text(Text::UpdateRevision),
            "startTime" => Lenient::Text(Text::StartTime),
            "replicas" => Lenient::Count(Counter::Replicas),
            "updatedReplicas" => Lenient::Count(Counter::UpdatedReplicas),
            "readyReplicas" => Lenient::Count(Counter::ReadyReplicas),
            "availableReplicas" => Lenient::Count(Counter::AvailableReplicas),
            "currentReplicas" => Lenient::Count(Counter::CurrentReplicas),
            "desiredNumberScheduled" => Lenient::Count(Counter::DesiredNumberScheduled),
            "currentNumberScheduled" => Lenient::Count(Counter::CurrentNumberScheduled),
            "updatedNumberScheduled" => Lenient::Count(Counter::UpdatedNumberScheduled),
            "numberAvailable" => Lenient::Count(Counter::NumberAvailable),
            "numberReady" => Lenient::Count(Counter::NumberReady),
            "fullyLabeledReplicas" => Lenient::Count(Counter::FullyLabeledReplicas),
            "succeeded" => Lenient::Count(Counter::Succeeded),
            "active" => Lenient::Count(Counter::Active),
            "failed" => Lenient::Count(Counter::Failed),
            "ready" => Lenient::Count(Counter::Ready),
            _ => return skip(map),
        };
        let value = map.next_value()?;
        c.set(field, value);
        Ok(())
    }

    fn not_a_map(&mut self, null: bool) {
        self.0.irregular |= !null;
    }
}

/// One list-shaped part of an object, decoding its elements into the [`Compact`].
trait Elements<'de> {
    /// Decodes the next element; `false` at the end of the list.
    fn element<A: SeqAccess<'de>>(&mut self, seq: &mut A) -> Result<bool, A::Error>;

    /// The part was not a list: `null` says whether it was null (the same as empty).
    fn not_a_list(&mut self, null: bool);
}

/// Decodes a value into an [`Elements`].
struct List<'s, S>(&'s mut S);

impl<'de, S: Elements<'de>> DeserializeSeed<'de> for List<'_, S> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de, S: Elements<'de>> Visitor<'de> for List<'_, S> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while self.0.element(&mut seq)? {}
        Ok(())
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        self.0.not_a_list(true);
        Ok(())
    }

    fn visit_none<E>(self) -> Result<(), E> {
        self.0.not_a_list(true);
        Ok(())
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<(), A::Error> {
        Checked.visit_map(map)?;
        self.0.not_a_list(false);
        Ok(())
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        self.0.not_a_list(false);
        Ok(())
    }

    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        self.0.not_a_list(false);
        Ok(())
    }

    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        self.0.not_a_list(false);
        Ok(())
    }

    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        self.0.not_a_list(false);
        Ok(())
    }

    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        self.0.not_a_list(false);
        Ok(())
    }
}

/// `status.conditions`: strictly read, so anything unusual is irregular.
struct ConditionList<'c, 'a>(&'c mut Compact<'a>);

impl<'de> Elements<'de> for ConditionList<'_, 'de> {
    fn element<A: SeqAccess<'de>>(&mut self, seq: &mut A) -> Result<bool, A::Error> {
        let mut condition = ConditionEntry {
            fields: ConditionFields::default(),
            observed_generation: None,
            irregular: false,
        };
        if seq.next_element_seed(Part(&mut condition))?.is_none() {
            return Ok(false);
        }
        self.0.irregular |= condition.irregular;
        if let Some(generation) = condition.observed_generation {
            let at = self.0.conditions.len();
            self.0.rare().condition_generations.push((at, generation));
        }
        self.0.conditions.push(condition.fields);
        Ok(true)
    }

    fn not_a_list(&mut self, null: bool) {
        self.0.irregular |= !null;
    }
}

/// One `status.conditions` entry.
#[derive(Clone, Debug, Default, PartialEq)]
struct ConditionFields<'a> {
    /// type, status, reason, message (strictly read: kstatus' rules). A missing or null
    /// message is an empty *owned* text, which no string in the input decodes to (an empty
    /// string borrows; an escaped one is never empty): the stricter rules tell the two apart
    /// without another field in every condition.
    text: [Cow<'a, str>; 4],
    /// Read leniently, for the stricter rules; borrowed (a timestamp has no escapes; one
    /// with escapes makes the object irregular, read in full).
    last_transition_time: &'a str,
}

impl ConditionFields<'_> {
    fn message_is_text(&self) -> bool {
        !matches!(&self.text[3], Cow::Owned(m) if m.is_empty())
    }
}

struct ConditionEntry<'a> {
    fields: ConditionFields<'a>,
    /// Its own `observedGeneration`, when an integer.
    observed_generation: Option<i64>,
    irregular: bool,
}

impl<'de> Section<'de> for ConditionEntry<'de> {
    fn entry<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        let slot = match key {
            "type" => 0,
            "status" => 1,
            "reason" => 2,
            "message" => 3,
            "observedGeneration" => {
                self.observed_generation = map.next_value::<Scalar>()?.int();
                return Ok(());
            }
            "lastTransitionTime" => {
                self.fields.last_transition_time = match map.next_value::<Scalar>()? {
                    Scalar::Str(Cow::Borrowed(time)) => time,
                    Scalar::Str(Cow::Owned(_)) => {
                        self.irregular = true;
                        ""
                    }
                    _ => "",
                };
                return Ok(());
            }
            _ => return skip(map),
        };
        self.fields.text[slot] = match map.next_value::<Scalar>()? {
            Scalar::Str(s) => s,
            // As if missing (see `ConditionFields::text`).
            Scalar::Null => Cow::Owned(String::new()),
            _ => {
                self.irregular = true;
                Cow::Borrowed("")
            }
        };
        Ok(())
    }

    fn not_a_map(&mut self, null: bool) {
        // A null entry reads as a condition with empty fields.
        self.irregular |= !null;
    }
}

/// `status.containerStatuses` (or `initContainerStatuses`): read leniently, keeping each
/// waiting container's name and reason.
struct ContainerStatuses<'c, 'a> {
    c: &'c mut Compact<'a>,
    /// `status.initContainerStatuses` (only the stricter rules read them).
    init: bool,
}

impl<'de> Elements<'de> for ContainerStatuses<'_, 'de> {
    fn element<A: SeqAccess<'de>>(&mut self, seq: &mut A) -> Result<bool, A::Error> {
        let mut container = Container::default();
        if seq.next_element_seed(Part(&mut container))?.is_none() {
            return Ok(false);
        }
        if let Some(reason) = container.reason {
            self.c
                .rare()
                .waiting
                .push((self.init, container.name, reason));
        }
        Ok(true)
    }

    // Anything but a list has no crash-looping containers.
    fn not_a_list(&mut self, _: bool) {}
}

#[derive(Default)]
struct Container<'a> {
    name: Option<Cow<'a, str>>,
    /// `state.waiting.reason`, when a string.
    reason: Option<Cow<'a, str>>,
}

impl<'de> Section<'de> for Container<'de> {
    fn entry<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        match key {
            "name" => self.name = map.next_value::<Scalar>()?.text(),
            "state" => {
                let mut state = Waiting::default();
                map.next_value_seed(Part(&mut state))?;
                self.reason = state.reason;
            }
            _ => skip(map)?,
        }
        Ok(())
    }

    fn not_a_map(&mut self, _: bool) {}
}

/// `state` of a container status, then its `waiting` (the same section, one level down).
#[derive(Default)]
struct Waiting<'a> {
    inside: bool,
    reason: Option<Cow<'a, str>>,
}

impl<'de> Section<'de> for Waiting<'de> {
    fn entry<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        match (self.inside, key) {
            (false, "waiting") => {
                let mut waiting = Waiting {
                    inside: true,
                    reason: None,
                };
                map.next_value_seed(Part(&mut waiting))?;
                self.reason = waiting.reason;
            }
            (true, "reason") => self.reason = map.next_value::<Scalar>()?.text(),
            _ => skip(map)?,
        }
        Ok(())
    }

    fn not_a_map(&mut self, _: bool) {}
}

/// `metadata.managedFields`: the time of each write, and whether it went to the status
/// subresource (read leniently: the stricter rules skip what they cannot read).
struct ManagedFields<'c, 'a>(&'c mut Compact<'a>);

impl<'de> Elements<'de> for ManagedFields<'_, 'de> {
    fn element<A: SeqAccess<'de>>(&mut self, seq: &mut A) -> Result<bool, A::Error> {
        let mut entry = ManagedEntry::default();
        if seq.next_element_seed(Part(&mut entry))?.is_none() {
            return Ok(false);
        }
        if let Some(time) = entry.time {
            self.0.rare().writes.push((entry.status, time));
        }
        Ok(true)
    }

    fn not_a_list(&mut self, _: bool) {}
}

#[derive(Default)]
struct ManagedEntry<'a> {
    status: bool,
    time: Option<Cow<'a, str>>,
}

impl<'de> Section<'de> for ManagedEntry<'de> {
    fn entry<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        match key {
            "subresource" => {
                self.status = map.next_value::<Scalar>()?.text().as_deref() == Some("status")
            }
            "time" => self.time = map.next_value::<Scalar>()?.text(),
            _ => skip(map)?,
        }
        Ok(())
    }

    fn not_a_map(&mut self, _: bool) {}
}

/// `metadata.ownerReferences`: whether one of them is the controller.
struct Owners(bool);

impl<'de> Elements<'de> for Owners {
    fn element<A: SeqAccess<'de>>(&mut self, seq: &mut A) -> Result<bool, A::Error> {
        let mut owner = Owner(false);
        let more = seq.next_element_seed(Part(&mut owner))?.is_some();
        self.0 |= owner.0;
        Ok(more)
    }

    fn not_a_list(&mut self, _: bool) {}
}

struct Owner(bool);

impl<'de> Section<'de> for Owner {
    fn entry<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        if key != "controller" {
            return skip(map);
        }
        self.0 = matches!(map.next_value::<Scalar>()?, Scalar::Bool(true));
        Ok(())
    }

    fn not_a_map(&mut self, _: bool) {}
}

/// `status.loadBalancer`: whether `ingress` is a non-empty list.
struct LoadBalancer<'c, 'a>(&'c mut Compact<'a>);

impl<'de> Section<'de> for LoadBalancer<'_, 'de> {
    fn entry<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        if key != "ingress" {
            return skip(map);
        }
        let mut ingress = Count(0);
        map.next_value_seed(List(&mut ingress))?;
        self.0.load_balancer_ingress = ingress.0 > 0;
        Ok(())
    }

    fn not_a_map(&mut self, _: bool) {}
}

/// Counts a list's elements (`0` for anything but a list).
struct Count(usize);

impl<'de> Elements<'de> for Count {
    fn element<A: SeqAccess<'de>>(&mut self, seq: &mut A) -> Result<bool, A::Error> {
        let more = seq.next_element_seed(Checked)?.is_some();
        self.0 += usize::from(more);
        Ok(more)
    }

    fn not_a_list(&mut self, _: bool) {
        self.0 = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn now() -> Timestamp {
        "2026-01-01T00:00:10Z".parse().unwrap()
    }

    /// Compact and full decoding give the same evaluation.
    fn same(object: &Value) -> Observed<'static> {
        let text: &'static str = Box::leak(serde_json::to_string(object).unwrap().into_boxed_str());
        let observed = Observed::from_json(text).unwrap();
        assert_eq!(
            observed.evaluate(now()),
            evaluate(object, now()),
            "{object}"
        );
        observed
    }

    #[test]
    fn regular_objects_stay_compact_and_agree() {
        let objects = regular_objects();
        for object in &objects {
            assert!(matches!(same(object), Observed::Compact(_)), "{object}");
        }
        let observed = same(&objects[0]);
        assert_eq!(
            (
                observed.api_version(),
                observed.kind(),
                observed.namespace(),
                observed.name()
            ),
            ("apps/v1", "Deployment", "n", "d")
        );
    }

    fn regular_objects() -> Vec<Value> {
        let template = json!({"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}});
        vec![
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "n", "generation": 2, "managedFields": [{"m": 1}]},
                "spec": {"replicas": 3, "progressDeadlineSeconds": 600, "template": template},
                "status": {"observedGeneration": 2, "replicas": 3, "updatedReplicas": 3, "readyReplicas": 2, "availableReplicas": 2,
                    "conditions": [{"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable", "lastTransitionTime": "x"}]}}),
            json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"generation": 1},
                "spec": {"replicas": 3, "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 2}}, "template": template},
                "status": {"observedGeneration": 1, "replicas": 3, "readyReplicas": 3, "currentReplicas": 2, "updatedReplicas": 1}}),
            json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "spec": {"updateStrategy": {"type": "OnDelete"}}}),
            json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "spec": {"replicas": 2, "updateStrategy": "odd"},
                "status": {"replicas": 2, "readyReplicas": 2, "currentReplicas": 2, "currentRevision": "a", "updateRevision": "b"}}),
            json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"generation": 1}, "status": {"observedGeneration": 1, "desiredNumberScheduled": 2, "currentNumberScheduled": 2, "updatedNumberScheduled": 1}}),
            json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"generation": 1}}),
            json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "spec": {"replicas": "3"}, "status": {"replicas": 1.5, "fullyLabeledReplicas": 1, "availableReplicas": 1, "readyReplicas": 1,
                "conditions": [{"type": "ReplicaFailure", "status": "False"}]}}),
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"creationTimestamp": "2026-01-01T00:00:00Z"},
                "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}}),
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"creationTimestamp": "2025-01-01T00:00:00Z"},
                "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}}),
            json!({"apiVersion": "v1", "kind": "Pod", "status": {"phase": "Running", "containerStatuses": [
                {"state": {"waiting": {"reason": "CrashLoopBackOff"}}, "name": "a"},
                {"name": "b", "state": {"running": {}}},
                {"name": "c", "state": {"waiting": {"reason": "CrashLoopBackOff"}}},
                "junk", {"name": 7, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}}),
            json!({"apiVersion": "v1", "kind": "Pod", "status": {"phase": "Evicted"}}),
            json!({"apiVersion": "v1", "kind": "Pod", "status": {"phase": "Running", "containerStatuses": {"a": 1}}}),
            json!({"apiVersion": "batch/v1", "kind": "Job", "spec": {"parallelism": 2, "suspend": true}, "status": {"conditions": [{"type": "Suspended", "status": "True"}]}}),
            json!({"apiVersion": "batch/v1", "kind": "Job", "spec": {"parallelism": 2}, "status": {"startTime": "t", "succeeded": 1, "active": 1}}),
            json!({"apiVersion": "batch/v1", "kind": "Job", "status": {"failed": 2, "conditions": [{"type": "Failed", "status": "True"}]}}),
            json!({"apiVersion": "v1", "kind": "Service", "spec": {"type": "LoadBalancer", "clusterIP": ""}}),
            json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "status": {"phase": "Pending"}}),
            json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "status": null}),
            json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "status": {"conditions": [
                {"type": "NamesAccepted", "status": "True"}, {"type": "Established", "status": "False", "reason": "Oops", "message": "bad"}]}}),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}}),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"deletionTimestamp": ""}, "data": {"a": "b"}}),
            json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"generation": 3}, "status": {"observedGeneration": 2}}),
            json!({"apiVersion": "example.com/v1", "kind": "Widget", "status": {"conditions": [null, {"type": "Stalled", "status": "True", "reason": "Bad", "message": "m"}]}}),
            json!({"apiVersion": "example.com/v1", "kind": "Widget", "status": {"conditions": [{"type": "Ready", "status": "Unknown", "reason": null, "message": "wait \"quoted\""}]}}),
            json!({"apiVersion": "example.com/v1", "kind": "Widget", "spec": 3, "status": null}),
        ]
    }

    /// Objects exercising every switch of the stricter policy.
    fn strict_cases() -> Vec<Value> {
        let cond = |t: &str, s: &str, extra: Value| {
            let mut c = json!({"type": t, "status": s});
            if let (Value::Object(c), Value::Object(extra)) = (&mut c, extra) {
                c.extend(extra);
            }
            c
        };
        let widget = |status: Value| json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "generation": 2}, "status": status});
        let applied = |status_write: Option<&str>, status: Value| {
            let mut writes = vec![
                json!({"manager": "strata", "operation": "Apply", "time": "2026-01-01T00:00:05Z"}),
                json!({"manager": "old", "operation": "Update", "time": "2025-12-01T00:00:00Z"}),
                json!("junk"),
                json!({"time": 7}),
            ];
            if let Some(time) = status_write {
                writes.push(json!({"manager": "c", "operation": "Update", "subresource": "status", "time": time}));
            }
            json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "generation": 3, "managedFields": writes}, "status": status})
        };
        let pod = |status: Value| json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "status": status});
        let waiting = |name: &str, reason: &str| json!({"name": name, "state": {"waiting": {"reason": reason, "message": "m"}}});
        let mut cases = vec![
            pod(json!({"phase": "Failed"})),
            pod(
                json!({"phase": "Pending", "containerStatuses": [waiting("app", "ImagePullBackOff"), waiting("side", "ContainerCreating")]}),
            ),
            pod(
                json!({"phase": "Pending", "initContainerStatuses": [waiting("init", "CreateContainerConfigError")], "containerStatuses": [waiting("app", "ErrImagePull")]}),
            ),
            pod(
                json!({"phase": "Pending", "initContainerStatuses": [waiting("init", "CrashLoopBackOff"), "junk", {"state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}),
            ),
            pod(
                json!({"phase": "Running", "containerStatuses": [waiting("app", "CrashLoopBackOff")], "initContainerStatuses": {"a": 1}}),
            ),
            widget(
                json!({"conditions": [cond("Ready", "False", json!({"reason": "InstallFailed", "message": "no"}))]}),
            ),
            widget(json!({"conditions": [cond("Ready", "False", json!({"reason": "Error"}))]})),
            widget(json!({"conditions": [cond("Ready", "False", json!({"reason": "Waiting"}))]})),
            widget(json!({"conditions": [cond("Degraded", "True", json!({}))]})),
            widget(json!({"conditions": [cond("Degraded", "True", json!({"message": null}))]})),
            widget(json!({"conditions": [cond("Degraded", "True", json!({"message": ""}))]})),
            widget(json!({"conditions": [cond("Degraded", "True", json!({"message": "disk"}))]})),
            widget(
                json!({"observedGeneration": 2, "conditions": [cond("Ready", "True", json!({})), cond("Synced", "False", json!({"message": "later"}))]}),
            ),
            widget(
                json!({"observedGeneration": 2, "conditions": [cond("Ready", "True", json!({})), cond("Programmed", "False", json!({}))]}),
            ),
            widget(
                json!({"observedGeneration": 2, "conditions": [cond("Ready", "True", json!({"observedGeneration": 1}))]}),
            ),
            widget(
                json!({"observedGeneration": 2, "conditions": [cond("Ready", "True", json!({"observedGeneration": "1"}))]}),
            ),
            widget(
                json!({"observedGeneration": 2, "conditions": [cond("Ready", "True", json!({"observedGeneration": 2.0}))]}),
            ),
            widget(json!({})),
            widget(json!(null)),
            json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}),
            widget(json!({"phase": "Ready"})),
            applied(None, json!({})),
            applied(None, json!({"phase": "Ready"})),
            applied(Some("2026-01-01T00:00:04Z"), json!({"phase": "Ready"})),
            applied(Some("2026-01-01T00:00:05Z"), json!({"phase": "Ready"})),
            applied(
                Some("2026-01-01T00:00:04Z"),
                json!({"conditions": [cond("Ready", "True", json!({"lastTransitionTime": "2026-01-01T00:00:06Z"}))]}),
            ),
            applied(
                Some("2026-01-01T00:00:04Z"),
                json!({"conditions": [cond("Ready", "True", json!({"lastTransitionTime": 5}))]}),
            ),
            applied(
                Some("2026-01-01T00:00:04Z"),
                json!({"observedGeneration": 3, "conditions": [cond("Ready", "True", json!({}))]}),
            ),
            applied(
                Some("2025-01-01T00:00:00Z"),
                json!({"observedGeneration": 2, "conditions": [cond("Ready", "True", json!({}))]}),
            ),
            json!({"apiVersion": "v1", "kind": "Service", "spec": {"type": "LoadBalancer", "clusterIP": "10.0.0.1"}}),
            json!({"apiVersion": "v1", "kind": "Service", "spec": {"type": "LoadBalancer", "clusterIP": "10.0.0.1"}, "status": {"loadBalancer": {"ingress": []}}}),
            json!({"apiVersion": "v1", "kind": "Service", "spec": {"type": "LoadBalancer", "clusterIP": "10.0.0.1"}, "status": {"loadBalancer": {"ingress": {"ip": "x"}}}}),
            json!({"apiVersion": "v1", "kind": "Service", "spec": {"type": "LoadBalancer", "clusterIP": "10.0.0.1"}, "status": {"loadBalancer": {"ingress": [{"ip": "1.2.3.4"}]}}}),
            json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"generation": 1}, "spec": {"replicas": 3, "updateStrategy": {"type": "OnDelete"}},
                "status": {"observedGeneration": 1, "replicas": 3, "readyReplicas": 3, "currentReplicas": 3, "updatedReplicas": 1}}),
            json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"generation": 1}, "spec": {"updateStrategy": {"type": "OnDelete"}},
                "status": {"observedGeneration": 1, "replicas": 1, "readyReplicas": 0, "currentReplicas": 1, "updatedReplicas": 1}}),
            json!({"apiVersion": "batch/v1", "kind": "Job", "status": {"startTime": "2026-01-01T00:00:00Z", "active": 1}}),
            json!({"apiVersion": "batch/v1", "kind": "Job", "status": {"startTime": "2026-01-01T00:00:00Z", "active": 1, "ready": 1}}),
            json!({"apiVersion": "batch/v1", "kind": "Job", "status": {"startTime": "2026-01-01T00:00:00Z", "active": 1, "ready": "1"}}),
            json!({"apiVersion": "batch/v1", "kind": "Job", "status": {"startTime": "2026-01-01T00:00:00Z", "succeeded": 1, "conditions": [cond("Complete", "True", json!({}))]}}),
            json!({"apiVersion": "batch/v1", "kind": "Job", "status": {"startTime": "2026-01-01T00:00:00Z", "active": 1, "conditions": [cond("SuccessCriteriaMet", "True", json!({}))]}}),
        ];
        cases.extend(regular_objects());
        cases
    }

    /// The stricter rules read the compact form exactly as the full object, switch by switch
    /// and all together.
    #[test]
    fn the_stricter_rules_judge_the_compact_form_as_the_full_one() {
        use crate::policy::{Policy, compute_compact, compute_with_pods};
        let strict = Policy::strict();
        let mut policies = vec![Policy::kstatus(), strict.clone()];
        for switch in 0..9 {
            let mut one = Policy::kstatus();
            match switch {
                0 => one.pod_failures = true,
                1 => one.condition_generations = true,
                2 => one.extra_conditions = true,
                3 => one.load_balancer_ingress = true,
                4 => one.on_delete_rollouts = true,
                5 => one.require_observed = true,
                6 => one.workload_failures = true,
                7 => one.fresh_status = true,
                _ => one.observed_bound = std::time::Duration::from_secs(2),
            }
            one.failure_grace = strict.failure_grace;
            if switch == 8 {
                one.fresh_status = true;
            }
            policies.push(one);
        }
        let health = crate::health::HealthRules::default();
        let mut strict_differs = 0;
        for object in strict_cases() {
            let text = serde_json::to_string(&object).unwrap();
            let Observed::Compact(compact) = Observed::from_json(&text).unwrap() else {
                panic!("decoded in full: {object}");
            };
            for policy in &policies {
                let full = compute_with_pods(&object, &[], now(), policy, &health)
                    .unwrap_or_else(|e| Evaluation::unknown(&e));
                assert_eq!(
                    compute_compact(&compact, now(), policy),
                    full,
                    "{object} under {policy:?}"
                );
            }
            strict_differs += usize::from(
                compute_compact(&compact, now(), &strict) != evaluate_fields(&compact, now()),
            );
        }
        // The table reaches the rules: most cases change under the strict policy.
        assert!(strict_differs >= 25, "{strict_differs}");
    }

    #[test]
    fn irregular_objects_are_decoded_in_full_and_agree() {
        for object in [
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"generation": "2"}}),
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"generation": null}}),
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"deletionTimestamp": 5}}),
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": [1]}),
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": null}),
            json!({"apiVersion": "v1", "kind": "Pod", "status": "broken"}),
            json!({"apiVersion": "v1", "kind": "Pod", "status": {"observedGeneration": 1.5}}),
            json!({"apiVersion": "v1", "kind": "Pod", "status": {"conditions": {}}}),
            json!({"apiVersion": "v1", "kind": "Pod", "status": {"conditions": ["x"]}}),
            json!({"apiVersion": "v1", "kind": "Pod", "status": {"conditions": [{"type": "Ready", "status": true}]}}),
            json!(["not", "an", "object"]),
        ] {
            assert!(matches!(same(&object), Observed::Full(_)), "{object}");
        }
    }

    #[test]
    fn repeated_keys_behave_like_a_decoded_map() {
        // serde_json keeps the last value of a repeated key; so must the compact form.
        let text = r#"{"apiVersion": "apps/v1", "kind": "Deployment",
            "spec": {"replicas": 5}, "spec": {"replicas": 1},
            "status": {"replicas": 9, "conditions": [{"type": "Stalled", "status": "True"}]},
            "status": {"replicas": 1, "updatedReplicas": 1, "readyReplicas": 1, "availableReplicas": 1}}"#;
        let full: Value = serde_json::from_str(text).unwrap();
        let observed = Observed::from_json(text).unwrap();
        assert!(matches!(observed, Observed::Compact(_)));
        assert_eq!(observed.evaluate(now()), evaluate(&full, now()));
    }

    #[test]
    fn arrays_decode_in_one_pass_and_keep_order() {
        let objects = json!([
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}},
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "b", "generation": "x"}},
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "c"}, "status": {"phase": "Running"}},
        ]);
        let text = serde_json::to_string(&objects).unwrap();
        let observed = Observed::many_from_json(&text).unwrap();
        let names: Vec<&str> = observed.iter().map(Observed::name).collect();
        assert_eq!(names, ["a", "b", "c"]);
        assert!(matches!(observed[1], Observed::Full(_)));
        for (o, full) in observed.iter().zip(objects.as_array().unwrap()) {
            assert_eq!(o.evaluate(now()), evaluate(full, now()));
        }
        assert!(Observed::many_from_json("[{").is_err());
    }
}
