//! The AdmissionReview envelope (admission.k8s.io v1 and v1beta1) and the decision every
//! webhook returns.

use serde::Serialize;
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

/// A parsed AdmissionReview: its API version (the answer uses the same) and the request.
#[derive(Clone, Debug, PartialEq)]
pub struct Review {
    pub api_version: String,
    pub request: Value,
}

impl Review {
    pub fn parse(body: &[u8]) -> Result<Self, BadReview> {
        let mut value: Value = serde_json::from_slice(body)
            .map_err(|e| BadReview(format!("body is not JSON: {e}")))?;
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
}
