//! Judging a resume value against a pending interrupt. Pure: the engine applies the verdict.
//!
//! Order of checks: the auth-required profile (a token may not resolve), the resume schema,
//! then the kind's own rules — approvals: the approver list, `refine` needs `refineFeedback`,
//! `edit-accept` needs `editedArtifactData`, then the vote and the quorum; clarifications:
//! every question answered; external events: every correlation key matches; low confidence:
//! `{action: "reject"}` fails the node (`interrupt_rejected`), any other value resumes it.

use serde_json::{json, Map, Value};

use super::{InterruptKind, InterruptRecord, Refusal, Resolver, Vote, VoteTally, AUTH_REQUIRED_PROFILE};
use crate::run::RunError;
use crate::timefmt::Millis;

/// How an interrupt closes.
#[derive(Debug, Clone, PartialEq)]
pub struct Closing {
    /// `accept`, `reject`, `refine`, `edit-accept`, `answered`, `received`, `resumed`.
    pub outcome: String,
    /// The node's outputs when it completes.
    pub outputs: Map<String, Value>,
    /// Set when the node fails instead (a rejection).
    pub failure: Option<RunError>,
    /// `refine`: the node suspends again with a new occurrence.
    pub refine: bool,
    /// `decidedBy` of the closing decision (`quorum:<n>-of-<m>` for a quorum).
    pub resolved_by: String,
    /// The resume value as recorded on `interrupt.resolved` (clarification answers as a map).
    pub resume_value: Value,
}

/// What a resume value does.
#[derive(Debug, Clone, PartialEq)]
pub struct Judgement {
    /// The vote it cast, for approvals.
    pub vote: Option<Vote>,
    /// The tally after it, when the vote counts toward the quorum.
    pub tally: Option<VoteTally>,
    /// `Some` when the interrupt closes; `None` when a vote was recorded and it stays pending.
    pub closing: Option<Closing>,
}

/// Who a vote in `value` from `resolver` counts for: the body's `voter`, else the resolver.
pub fn voter_of(value: &Value, resolver: &Resolver) -> String {
    value
        .get("voter")
        .and_then(Value::as_str)
        .filter(|voter| !voter.is_empty())
        .unwrap_or_else(|| resolver.identity())
        .to_owned()
}

/// Judges `value` from `resolver` against the pending `record` at `now`; `prior` is the
/// voter's earlier vote on it as the store holds it (an approval vote replaces it).
pub fn judge(
    record: &InterruptRecord,
    value: &Value,
    resolver: &Resolver,
    prior: Option<&Vote>,
    now: Millis,
) -> Result<Judgement, Refusal> {
    if record.profile.as_deref() == Some(AUTH_REQUIRED_PROFILE) && *resolver == Resolver::Token {
        return Err(Refusal::Forbidden(
            "this interrupt requires a bearer credential with approvals:respond; its token cannot resolve it".into(),
        ));
    }
    if let Some(schema) = &record.resume_schema {
        if let Err(violations) = crate::schema::check_against(schema, value) {
            return Err(schema_refusal(record, value, violations));
        }
    }
    let close = |outcome: &str, outputs: Map<String, Value>, resume_value: Value| Judgement {
        vote: None,
        tally: None,
        closing: Some(Closing {
            outcome: outcome.to_owned(),
            outputs,
            failure: None,
            refine: false,
            resolved_by: resolver.identity().to_owned(),
            resume_value,
        }),
    };
    match record.kind {
        InterruptKind::Approval => judge_approval(record, value, resolver, prior, now),
        InterruptKind::Clarification => {
            let answers = answers_map(record, value)?;
            let mut outputs = Map::new();
            outputs.insert("answers".into(), Value::Object(answers.clone()));
            Ok(close("answered", outputs, json!({ "answers": answers })))
        }
        InterruptKind::ExternalEvent => {
            check_correlation(record, value)?;
            let mut outputs = Map::new();
            outputs.insert("event".into(), value.clone());
            Ok(close("received", outputs, value.clone()))
        }
        InterruptKind::LowConfidence if value.get("action").and_then(Value::as_str) == Some("reject") => {
            let mut judgement = close("reject", Map::new(), value.clone());
            if let Some(closing) = judgement.closing.as_mut() {
                closing.failure = Some(RunError::new("interrupt_rejected", "the low-confidence decision was rejected"));
            }
            Ok(judgement)
        }
        _ => {
            let mut outputs = Map::new();
            outputs.insert("resumeValue".into(), value.clone());
            Ok(close("resumed", outputs, value.clone()))
        }
    }
}

fn judge_approval(
    record: &InterruptRecord,
    value: &Value,
    resolver: &Resolver,
    prior: Option<&Vote>,
    now: Millis,
) -> Result<Judgement, Refusal> {
    let action = value.get("action").and_then(Value::as_str).unwrap_or_default().to_owned();
    let approvers: Vec<&str> = record.data["approversList"]
        .as_array()
        .map(|list| list.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if !approvers.is_empty() {
        let allowed = matches!(resolver, Resolver::Principal(subject) if approvers.contains(&subject.as_str()));
        if !allowed {
            return Err(Refusal::Forbidden("the caller is not on this approval's approversList".into()));
        }
    }
    let mut outputs = Map::new();
    outputs.insert("action".into(), json!(action));
    outputs.insert("decidedBy".into(), json!(resolver.identity()));
    for field in ["feedback", "comment", "refineFeedback", "editedArtifactData"] {
        if let Some(given) = value.get(field) {
            outputs.insert(field.into(), given.clone());
        }
    }
    let closing =
        |outcome: &str, outputs: Map<String, Value>, failure: Option<RunError>, resolved_by: String| Closing {
            outcome: outcome.to_owned(),
            outputs,
            failure,
            refine: outcome == "refine",
            resolved_by,
            resume_value: value.clone(),
        };
    match action.as_str() {
        "refine" => {
            if !value.get("refineFeedback").is_some_and(Value::is_object) {
                return Err(Refusal::invalid(
                    "`refine` needs a `refineFeedback` object",
                    json!({ "field": "refineFeedback" }),
                ));
            }
            let closing = closing("refine", outputs, None, resolver.identity().to_owned());
            let vote = Vote {
                voter: resolver.identity().to_owned(),
                decided_by: resolver.identity().to_owned(),
                action,
                at: now,
            };
            return Ok(Judgement { vote: Some(vote), tally: None, closing: Some(closing) });
        }
        "edit-accept" if value.get("editedArtifactData").is_none() => {
            return Err(Refusal::invalid(
                "`edit-accept` needs `editedArtifactData`",
                json!({ "field": "editedArtifactData" }),
            ));
        }
        _ => {}
    }
    let voter = voter_of(value, resolver);
    let vote =
        Vote { voter: voter.clone(), decided_by: resolver.identity().to_owned(), action: action.clone(), at: now };
    // A repeat vote replaces the voter's earlier one: the stored one, else (an older state)
    // the one in the state's own list. O(1) either way: the tally is adjusted, not recounted.
    let earlier = prior.or_else(|| record.votes.iter().rev().find(|earlier| earlier.voter == voter));
    let (mut accepts, mut rejects) = record.tally();
    match earlier.map(|earlier| earlier.action.as_str()) {
        Some("reject") => rejects = rejects.saturating_sub(1),
        Some(_) => accepts = accepts.saturating_sub(1),
        None => {}
    }
    if action == "reject" {
        rejects += 1;
    } else {
        accepts += 1;
    }
    let tally = VoteTally {
        accepts: u32::try_from(accepts).unwrap_or(u32::MAX),
        rejects: u32::try_from(rejects).unwrap_or(u32::MAX),
    };
    let required = record.data["requiredApprovals"].as_u64().unwrap_or(1).max(1) as usize;
    let reject_threshold = if record.data["rejectionPolicy"] == "majority" { required / 2 + 1 } else { 1 };
    let quorum_label = |count: usize| {
        if required > 1 {
            format!("quorum:{count}-of-{required}")
        } else {
            resolver.identity().to_owned()
        }
    };
    let closing = if rejects >= reject_threshold {
        let failure = RunError::new("interrupt_rejected", "the approval was rejected");
        Some(closing("reject", outputs, Some(failure), quorum_label(rejects)))
    } else if accepts >= required {
        Some(closing(&action, outputs, None, quorum_label(accepts)))
    } else {
        None
    };
    Ok(Judgement { vote: Some(vote), tally: Some(tally), closing })
}

/// Clarification answers as a map from question id to answer, whichever shape was sent.
fn answers_map(record: &InterruptRecord, value: &Value) -> Result<Map<String, Value>, Refusal> {
    let answers = match value.get("answers") {
        Some(Value::Object(map)) => map.clone(),
        Some(Value::Array(items)) => items
            .iter()
            .filter_map(|item| Some((item.get("id")?.as_str()?.to_owned(), item.get("answer")?.clone())))
            .collect(),
        _ => Map::new(),
    };
    let missing: Vec<&str> = record.data["questions"]
        .as_array()
        .map(|questions| {
            questions.iter().filter_map(|q| q["id"].as_str()).filter(|id| !answers.contains_key(*id)).collect()
        })
        .unwrap_or_default();
    if !missing.is_empty() {
        return Err(Refusal::invalid("every question needs an answer", json!({ "unanswered": missing })));
    }
    for question in record.data["questions"].as_array().into_iter().flatten() {
        let (Some(id), Some(schema)) = (question["id"].as_str(), question.get("schema")) else { continue };
        let Err(violations) = crate::schema::check_against(schema, &answers[id]) else { continue };
        // Where the answer sits in what was sent: `/answers/<id>` or `/answers/<index>/answer`.
        let at = match value.get("answers") {
            Some(Value::Array(items)) => {
                let index = items.iter().position(|item| item.get("id").and_then(Value::as_str) == Some(id));
                format!("/answers/{}/answer", index.unwrap_or(0))
            }
            _ => format!("/answers/{}", escape_pointer(id)),
        };
        let violations = violations
            .into_iter()
            .map(|mut violation| {
                let inner = violation["path"].as_str().filter(|path| *path != "/").unwrap_or("").to_owned();
                violation["path"] = json!(format!("{at}{inner}"));
                violation
            })
            .collect();
        return Err(question_refusal(id, violations));
    }
    Ok(answers)
}

fn escape_pointer(segment: &str) -> String {
    segment.replace('~', "~0").replace('/', "~1")
}

/// The refusal of a value that fails the resume schema: the first (most specific) violation
/// is named in the message — its instance path, what is wrong and the keyword — and, for a
/// clarification, the question the failing answer belongs to.
fn schema_refusal(record: &InterruptRecord, value: &Value, violations: Vec<Value>) -> Refusal {
    let question = (record.kind == InterruptKind::Clarification)
        .then(|| violations.first().and_then(|first| question_at(value, first["path"].as_str()?)))
        .flatten();
    match question {
        Some(id) => question_refusal(&id, violations),
        None => {
            let first = violations.first().cloned().unwrap_or_else(|| json!({}));
            let message = format!(
                "the resume value does not match the interrupt's resumeSchema {}",
                crate::schema::describe(&first)
            );
            let details = json!({ "path": first["path"], "keyword": first["keyword"], "violations": violations });
            Refusal::invalid(message, details)
        }
    }
}

fn question_refusal(id: &str, violations: Vec<Value>) -> Refusal {
    let first = violations.first().cloned().unwrap_or_else(|| json!({}));
    let message =
        format!("the answer to question `{id}` does not match its schema {}", crate::schema::describe(&first));
    let details = json!({
        "questionId": id, "path": first["path"], "keyword": first["keyword"], "violations": violations,
    });
    Refusal::invalid(message, details)
}

/// The question id an instance path under `/answers` points into, in either answer shape.
fn question_at(value: &Value, path: &str) -> Option<String> {
    let segment = path.strip_prefix("/answers/")?.split('/').next()?;
    let segment = segment.replace("~1", "/").replace("~0", "~");
    match value.get("answers")? {
        Value::Object(map) => map.contains_key(&segment).then_some(segment),
        Value::Array(items) => items.get(segment.parse::<usize>().ok()?)?.get("id")?.as_str().map(str::to_owned),
        _ => None,
    }
}

/// An external event must carry every correlation key with the awaited value, at the top
/// level of the resume value or inside its `eventPayload`.
fn check_correlation(record: &InterruptRecord, value: &Value) -> Result<(), Refusal> {
    let event = value.get("eventPayload").filter(|payload| payload.is_object()).unwrap_or(value);
    let Some(correlation) = record.data["correlation"].as_object() else { return Ok(()) };
    let mismatched: Vec<&str> = correlation
        .iter()
        .filter(|(key, expected)| event.get(key.as_str()) != Some(*expected))
        .map(|(k, _)| k.as_str())
        .collect();
    if mismatched.is_empty() {
        Ok(())
    } else {
        Err(Refusal::invalid(
            "the event does not match the interrupt's correlation",
            json!({ "reason": "correlation_mismatch", "keys": mismatched }),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::interrupt::request::approval_gate;
    use crate::interrupt::InterruptState;

    fn gate(config: Value) -> InterruptRecord {
        pending("gate", approval_gate("gate", config.as_object().unwrap()).unwrap())
    }

    fn by(subject: &str) -> Resolver {
        Resolver::Principal(subject.into())
    }

    #[test]
    fn an_action_outside_the_gate_is_invalid() {
        let record = gate(json!({ "actions": ["accept", "reject"] }));
        let refusal = judge(&record, &json!({ "action": "maybe" }), &by("alice"), None, 1).unwrap_err();
        assert_eq!(refusal.code(), "validation_error");
    }

    #[test]
    fn a_quorum_needs_distinct_voters_and_a_repeat_vote_replaces() {
        let mut record = gate(json!({ "requiredApprovals": 3, "rejectionPolicy": "majority" }));
        // The store's votes by voter.
        let mut stored = std::collections::HashMap::new();
        for voter in ["a", "b", "b"] {
            let value = json!({ "action": "accept", "voter": voter });
            let judged = judge(&record, &value, &by("key"), stored.get(voter), 1).unwrap();
            assert!(judged.closing.is_none());
            record.tally = judged.tally;
            stored.insert(voter, judged.vote.unwrap());
        }
        assert_eq!(record.tally(), (2, 0));
        let third = judge(&record, &json!({ "action": "accept", "voter": "c" }), &by("key"), None, 2).unwrap();
        let closing = third.closing.expect("quorum reached");
        assert_eq!((closing.outcome.as_str(), closing.resolved_by.as_str()), ("accept", "quorum:3-of-3"));
    }

    #[test]
    fn majority_rejection_needs_two_of_three() {
        let mut record = gate(json!({ "requiredApprovals": 3, "rejectionPolicy": "majority" }));
        let first = judge(&record, &json!({ "action": "reject", "voter": "a" }), &by("key"), None, 1).unwrap();
        assert!(first.closing.is_none());
        record.tally = first.tally;
        let second = judge(&record, &json!({ "action": "reject", "voter": "b" }), &by("key"), None, 1).unwrap();
        let failure = second.closing.unwrap().failure.unwrap();
        assert_eq!(failure.code, "interrupt_rejected");
    }

    #[test]
    fn approvers_list_and_auth_required_are_enforced() {
        let record = gate(json!({ "approversList": ["alice"] }));
        let accept = json!({ "action": "accept" });
        assert_eq!(judge(&record, &accept, &by("bob"), None, 1).unwrap_err().code(), "forbidden");
        assert!(judge(&record, &accept, &by("alice"), None, 1).is_ok());
        let record = gate(json!({ "profile": "openwop-interrupt-auth-required" }));
        assert_eq!(
            judge(&record, &json!({ "action": "accept" }), &Resolver::Token, None, 1).unwrap_err().code(),
            "forbidden"
        );
    }

    #[test]
    fn an_older_state_counts_its_own_votes_and_a_repeat_replaces_one_of_them() {
        let mut record = gate(json!({ "requiredApprovals": 3 }));
        record.votes = vec![Vote { voter: "a".into(), decided_by: "key".into(), action: "reject".into(), at: 0 }];
        record.data["rejectionPolicy"] = json!("majority");
        assert_eq!(record.tally(), (0, 1));
        let judged = judge(&record, &json!({ "action": "accept", "voter": "a" }), &by("key"), None, 1).unwrap();
        assert_eq!(judged.tally, Some(VoteTally { accepts: 1, rejects: 0 }));
    }

    /// The pending record of `request`, raised by `node_id`.
    fn pending(node_id: &str, request: crate::interrupt::request::InterruptRequest) -> InterruptRecord {
        InterruptRecord {
            id: "int-1".into(),
            node_id: node_id.into(),
            occurrence: 1,
            kind: request.kind,
            key: format!("r:{node_id}:1"),
            data: request.data,
            resume_schema: request.resume_schema,
            timeout_ms: None,
            profile: request.profile,
            requested_at: 0,
            votes: Vec::new(),
            tally: None,
            attempt: 0,
            heartbeat_ms: None,
            heartbeat_at: None,
            state: InterruptState::Pending,
        }
    }

    fn refused(record: &InterruptRecord, value: Value) -> (String, Value) {
        match judge(record, &value, &by("alice"), None, 1).unwrap_err() {
            Refusal::Invalid { message, details } => (message, details),
            other => panic!("not a validation refusal: {other:?}"),
        }
    }

    fn clarification() -> InterruptRecord {
        let config = json!({ "questions": [
            { "id": "colour", "question": "Colour?", "schema": { "type": "string", "minLength": 2 } },
            { "id": "count", "question": "How many?", "schema": { "type": "integer", "maximum": 9 } },
        ] });
        pending("n", crate::interrupt::request::clarification_gate(config.as_object().unwrap()).unwrap())
    }

    #[test]
    fn a_wrong_answer_names_its_question_rule_and_path() {
        let record = clarification();
        let (message, details) = refused(&record, json!({ "answers": { "colour": "red", "count": 12 } }));
        assert!(!message.contains("anyOf"), "{message}");
        assert!(message.contains("`count`") && message.contains("maximum"), "{message}");
        assert_eq!(details["questionId"], "count", "{details}");
        assert_eq!(details["path"], "/answers/count", "{details}");
        assert_eq!(details["keyword"], "maximum", "{details}");
    }

    #[test]
    fn the_list_form_of_answers_is_checked_against_each_question_schema() {
        let record = clarification();
        let value = json!({ "answers": [{ "id": "colour", "answer": 7 }, { "id": "count", "answer": 3 }] });
        let (message, details) = refused(&record, value);
        assert!(message.contains("`colour`") && message.contains("string"), "{message}");
        assert_eq!((details["questionId"].as_str(), details["keyword"].as_str()), (Some("colour"), Some("type")));
        assert_eq!(details["path"], "/answers/0/answer", "{details}");
    }

    #[test]
    fn an_approval_value_outside_the_actions_names_the_rule() {
        let record = gate(json!({ "actions": ["accept", "reject"] }));
        let (message, details) = refused(&record, json!({ "action": "maybe" }));
        assert!(message.contains("/action") && message.contains("enum"), "{message}");
        assert_eq!((details["path"].as_str(), details["keyword"].as_str()), (Some("/action"), Some("enum")));
    }

    #[test]
    fn an_external_event_payload_names_the_deepest_failing_path() {
        let config = json!({ "kind": "external-event",
            "data": { "eventType": "paid", "correlation": { "order": "o-1" } },
            "resumeSchema": { "type": "object", "properties": { "eventPayload": { "anyOf": [
                { "type": "object", "properties": { "amount": { "type": "number" } } },
                { "type": "null" },
            ] } } } });
        let record = pending("n", crate::interrupt::request::interrupt_node("n", config.as_object().unwrap()).unwrap());
        let (message, details) = refused(&record, json!({ "eventPayload": { "order": "o-1", "amount": "ten" } }));
        assert!(!message.contains("anyOf"), "{message}");
        assert_eq!(
            (details["path"].as_str(), details["keyword"].as_str()),
            (Some("/eventPayload/amount"), Some("type"))
        );
    }
}
