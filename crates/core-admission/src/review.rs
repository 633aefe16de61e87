//! The AdmissionReview envelope (admission.k8s.io v1 and v1beta1) and the decision every
//! webhook returns.

use core_status::compact::Checked;
use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// A decision about one admission request.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Decision {
    pub allowed: bool,
    /// HTTP-like code of a denial (the pod-eviction webhook sets 400/403/429/500).
    pub code: Option<u16>,
    pub message: Option<String>,
    pub warnings: Vec<String>,
    /// Calls the webhook makes besides answering (HTTP to pods, patches), listed so that an
    /// offline review can show them without performing them.
    pub side_effects: Vec<String>,
    /// The pods prepare-downscale calls, as (pod name, URL): the URL is the pod's IP, so the
    /// name travels beside it (the server marks pods by name).
    #[serde(skip)]
    pub pod_calls: Vec<(String, String)>,
}

impl Decision {
    pub fn allow() -> Self {
        Self {
            allowed: true,
            ..Self::default()
        }
    }

    pub fn allow_with_warning(warning: impl Into<String>) -> Self {
        Self {
            allowed: true,
            warnings: vec![warning.into()],
            ..Self::default()
        }
    }

    pub fn allow_with_message(message: impl Into<String>) -> Self {
        Self {
            allowed: true,
            message: Some(message.into()),
            ..Self::default()
        }
    }

    pub fn deny(message: impl Into<String>) -> Self {
        Self {
            allowed: false,
            message: Some(message.into()),
            ..Self::default()
        }
    }

    pub fn deny_with_code(code: u16, message: impl Into<String>) -> Self {
        Self {
            allowed: false,
            code: Some(code),
            message: Some(message.into()),
            ..Self::default()
        }
    }
}

/// Why a body is not an AdmissionReview (the server answers HTTP 400 with this).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BadReview(pub String);

/// Which parts of a JSON value a decision reads; decoding skips the rest without building it
/// (an AdmissionReview carries two whole objects, most of which no rule looks at).
#[derive(Clone, Copy, Debug)]
pub enum Shape<'a> {
    /// The whole value.
    All,
    /// Of an object, only these members, each decoded through its own shape. A value of any
    /// other JSON type is kept whole, so that rules see the same wrong type they would see in
    /// the full decoding.
    Members(&'a [(&'a str, Shape<'a>)]),
    /// Of an object, every member, these ones decoded through their own shapes.
    AllBut(&'a [(&'a str, Shape<'a>)]),
}

impl<'de> DeserializeSeed<'de> for Shape<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        match self {
            Shape::All => Value::deserialize(deserializer),
            Shape::Members(members) => deserializer.deserialize_any(Pruned {
                members,
                others: false,
            }),
            Shape::AllBut(members) => deserializer.deserialize_any(Pruned {
                members,
                others: true,
            }),
        }
    }
}

/// Builds a value as [`Value`]'s own visitor does, except that object members are filtered.
struct Pruned<'a> {
    members: &'a [(&'a str, Shape<'a>)],
    /// Whether members not listed are kept whole (else skipped).
    others: bool,
}

/// An object member's name: its index among the listed members, or the name itself when
/// unlisted members are kept; `None` for one that is skipped (not allocated).
struct MemberName<'a>(&'a Pruned<'a>);

enum Member {
    Listed(usize),
    Other(String),
    Skipped,
}

impl<'de> DeserializeSeed<'de> for MemberName<'_> {
    type Value = Member;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Member, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl Visitor<'_> for MemberName<'_> {
    type Value = Member;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an object member name")
    }

    fn visit_str<E: serde::de::Error>(self, name: &str) -> Result<Member, E> {
        Ok(match self.0.members.iter().position(|(n, _)| *n == name) {
            Some(i) => Member::Listed(i),
            None if self.0.others => Member::Other(name.to_string()),
            None => Member::Skipped,
        })
    }
}

impl<'de> Visitor<'de> for Pruned<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = serde_json::Map::new();
        while let Some(member) = map.next_key_seed(MemberName(&self))? {
            match member {
                Member::Listed(i) => {
                    let (name, shape) = self.members[i];
                    object.insert(name.to_string(), map.next_value_seed(shape)?);
                }
                Member::Other(name) => {
                    object.insert(name, map.next_value()?);
                }
                Member::Skipped => {
                    map.next_value_seed(Checked)?;
                }
            }
        }
        Ok(Value::Object(object))
    }
}

/// A parsed AdmissionReview: its API version (the answer uses the same) and the request.
#[derive(Clone, Debug, PartialEq)]
pub struct Review {
    pub api_version: String,
    pub request: Value,
}

impl Review {
    /// The whole review, every member of the request kept.
    pub fn parse(body: &[u8]) -> Result<Self, BadReview> {
        Self::parse_reading(body, Shape::All)
    }

    /// The review with only what a decision reads: `request` decoded through `request`
    /// (everything else in it skipped, not built). The body must still be valid UTF-8 JSON
    /// throughout, as for [`Review::parse`].
    pub fn parse_reading(body: &[u8], request: Shape) -> Result<Self, BadReview> {
        let not_json = |e: &dyn std::fmt::Display| BadReview(format!("body is not JSON: {e}"));
        // One validation of the whole body: skipped members are then checked for syntax only,
        // and the kept strings need no second UTF-8 check.
        let text = std::str::from_utf8(body).map_err(|e| not_json(&e))?;
        let members = [
            ("apiVersion", Shape::All),
            ("kind", Shape::All),
            ("request", request),
        ];
        let envelope = Shape::Members(&members);
        let mut reader = serde_json::Deserializer::from_str(text);
        let mut value = envelope
            .deserialize(&mut reader)
            .and_then(|v| reader.end().map(|()| v))
            .map_err(|e| not_json(&e))?;
        let api_version = value
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if !matches!(
            api_version,
            "admission.k8s.io/v1" | "admission.k8s.io/v1beta1"
        ) {
            return Err(BadReview(format!(
                "apiVersion must be admission.k8s.io/v1 or v1beta1, got {api_version:?}"
            )));
        }
        let api_version = api_version.to_string();
        if value.get("kind").and_then(Value::as_str) != Some("AdmissionReview") {
            return Err(BadReview("kind must be AdmissionReview".into()));
        }
        // Moved out, not cloned: the request holds both objects, most of the body.
        let request = value
            .get_mut("request")
            .filter(|r| r.is_object())
            .map(Value::take)
            .ok_or_else(|| BadReview("request is missing".into()))?;
        if request
            .get("uid")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            return Err(BadReview("request.uid is missing".into()));
        }
        Ok(Self {
            api_version,
            request,
        })
    }

    pub fn field(&self, name: &str) -> &str {
        self.request
            .get(name)
            .and_then(Value::as_str)
            .unwrap_or_default()
    }

    /// The response envelope, echoing the request uid.
    pub fn respond(&self, decision: &Decision) -> Value {
        let mut response = json!({"uid": self.field("uid"), "allowed": decision.allowed});
        if decision.code.is_some() || decision.message.is_some() {
            let mut status = json!({});
            if let Some(code) = decision.code {
                status["code"] = json!(code);
            }
            if let Some(message) = &decision.message {
                status["message"] = json!(message);
            }
            response["status"] = status;
        }
        if !decision.warnings.is_empty() {
            response["warnings"] = json!(decision.warnings);
        }
        json!({"apiVersion": self.api_version, "kind": "AdmissionReview", "response": response})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelopes() {
        let ok = br#"{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{"uid":"u-1"}}"#;
        let review = Review::parse(ok).unwrap();
        let answer = review.respond(&Decision::deny_with_code(429, "no"));
        assert_eq!(answer["apiVersion"], "admission.k8s.io/v1beta1");
        assert_eq!(
            answer["response"],
            json!({"uid": "u-1", "allowed": false, "status": {"code": 429, "message": "no"}})
        );
        for bad in [
            &b"not json"[..],
            br#"{"apiVersion":"v1","kind":"AdmissionReview","request":{"uid":"x"}}"#,
            br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#,
            br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{}}"#,
        ] {
            assert!(
                Review::parse(bad).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn shapes_keep_only_what_is_read() {
        let labels = Shape::Members(&[("metadata", Shape::Members(&[("labels", Shape::All)]))]);
        let reads = Shape::AllBut(&[("object", labels), ("oldObject", Shape::All)]);
        let cases: &[(&str, Value)] = &[
            // Listed members through their shapes, unlisted request members whole.
            (
                r#"{"uid":"u","options":{"a":[1,{"b":2}]},"object":{"kind":"X","metadata":{"name":"n","labels":{"l":"v"}},"spec":{"x":1}},"oldObject":{"kind":"Y","spec":{"x":1}}}"#,
                json!({"uid":"u","options":{"a":[1,{"b":2}]},"object":{"metadata":{"labels":{"l":"v"}}},"oldObject":{"kind":"Y","spec":{"x":1}}}),
            ),
            // A value of another type where an object is expected stays as it is.
            (
                r#"{"uid":"u","object":{"metadata":["labels"]},"oldObject":7}"#,
                json!({"uid":"u","object":{"metadata":["labels"]},"oldObject":7}),
            ),
            (
                r#"{"uid":"u","object":"text"}"#,
                json!({"uid":"u","object":"text"}),
            ),
            // Escaped member names are matched decoded; a repeated member: the last one wins,
            // as in the full decoding.
            (
                r#"{"uid":"u","object":{"met\u0061data":{"labels":1,"labels":{"k":"v"}},"skipped":"x"}}"#,
                json!({"uid":"u","object":{"metadata":{"labels":{"k":"v"}}}}),
            ),
        ];
        for (request, want) in cases {
            let body = format!(
                r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{request}}}"#
            );
            let review = Review::parse_reading(body.as_bytes(), reads).unwrap();
            assert_eq!(&review.request, want, "{request}");
            assert_eq!(
                Review::parse(body.as_bytes()).unwrap().request,
                serde_json::from_str::<Value>(request).unwrap(),
                "{request}"
            );
        }
        // Skipped parts are checked as strictly as decoded ones: bad UTF-8, bad syntax,
        // trailing bytes, numbers out of range, lone surrogates, nesting over the limit — in
        // a skipped member of an object and in a skipped member of the envelope.
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        let bad: [&[u8]; 7] = [
            b"\"\xff\"",
            b"\"x\"}",
            b"\"x\"]",
            b"1e999",
            br#""\ud800""#,
            br#""\q""#,
            deep.as_bytes(),
        ];
        let ok: [&[u8]; 4] = [b"\"x\"", b"1e300", br#""\ud83d\ude00""#, b"[[[[{}]]]]"];
        for (value, valid) in bad
            .iter()
            .map(|v| (v, false))
            .chain(ok.iter().map(|v| (v, true)))
        {
            for body in [
                [&br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","object":{"skipped":"#[..], value, b"}}}"].concat(),
                [&br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","skipped":"#[..], value, br#","request":{"uid":"u"}}"#].concat(),
            ] {
                let text = String::from_utf8_lossy(&body);
                assert_eq!(
                    serde_json::from_slice::<Value>(&body).is_ok(),
                    valid,
                    "serde_json on {text}"
                );
                assert_eq!(Review::parse_reading(&body, reads).is_ok(), valid, "{text}");
                assert_eq!(Review::parse(&body).is_ok(), valid, "{text}");
            }
        }
        let trailing = br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u"}} x"#;
        assert!(Review::parse_reading(trailing, reads).is_err());
    }
}
