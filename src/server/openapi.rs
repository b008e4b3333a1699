//! The OpenAPI 3.1 document of `workjournal serve` (SPEC section 10),
//! generated from the wire types ([`crate::wire`]) rather than written by
//! hand, so that it cannot drift from what the server reads and answers.
//!
//! Each route of [`wire::OPS`] is one `POST /v1/<op>` path: its request
//! body is the schema of the type [`wire::Request::decode`] reads for it,
//! derived by `schemars` from the type and its serde attributes in the
//! *deserialize* contract (what the server accepts: `deny_unknown_fields`
//! refuses unknown fields, a `default` field may be left out); its 200
//! reply is the schema of the type the server answers with, in the
//! *serialize* contract (what the server sends: every field it always
//! writes is required). The error replies sit beside the 200 one, one per
//! status of [`ErrorBody::status`], each naming the error kinds it carries.
//! The read-only routes that need no field also have a `GET` form.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use schemars::generate::SchemaSettings;
use schemars::{Schema, SchemaGenerator};
use serde_json::{Map, Value, json};

use crate::wire::{self, ErrorBody, Request};

/// Where the document keeps its named schemas, as a JSON pointer.
const SCHEMAS: &str = "/components/schemas";

/// Every error kind the server answers with and what it means (SPEC
/// section 10, docs/API.md); the status of each is [`ErrorBody::status`].
const ERROR_KINDS: &[(&str, &str)] = &[
    (
        "bad_request",
        "the request could not be read: malformed JSON, unknown field, wrong type, number out of range, bad base64; nothing changed",
    ),
    (
        "invalid_input",
        "the queue refused it: `count` 0, empty flow name, payload over `max_payload_bytes`",
    ),
    (
        "unauthorized",
        "TCP without the right `Authorization: Bearer <token>`",
    ),
    (
        "forbidden",
        "the peer's uid may not use this socket, or the read-only token asked for a change",
    ),
    ("not_found", "no such operation"),
    (
        "timeout",
        "the request body did not arrive within the server's body timeout",
    ),
    (
        "lease_lost",
        "the receipt's claim is no longer current (fields `id`, `delivery`, `lease`)",
    ),
    (
        "payload_too_large",
        "the body is over `max_payload_bytes` in base64 plus 64 KiB; split a batch",
    ),
    (
        "locked",
        "the served queue's storage is locked by another process",
    ),
    ("full", "`max_backlog` reached (field `limit`)"),
    ("io", "the server's storage failed"),
    ("storage", "the server's storage failed"),
    ("corrupt", "the server's storage is corrupt"),
    (
        "decode",
        "a record of the server's storage could not be read",
    ),
    ("backend", "the server's Redis failed"),
    ("closed", "the server is shutting down; try again"),
];

/// The document as JSON text, built once (SPEC section 10): what
/// `GET /v1/openapi.json` answers.
pub fn openapi_json() -> &'static str {
    static TEXT: OnceLock<String> = OnceLock::new();
    TEXT.get_or_init(|| serde_json::to_string_pretty(&openapi_document()).unwrap_or_default())
}

/// The OpenAPI 3.1 document of every route (SPEC section 10), generated
/// from the wire types.
fn openapi_document() -> Value {
    let settings = SchemaSettings::draft2020_12().with(|s| s.definitions_path = SCHEMAS.into());
    let mut requests = settings.clone().for_deserialize().into_generator();
    let mut replies = settings.for_serialize().into_generator();
    let error = replies.subschema_for::<wire::ErrorReply>().to_value();

    let mut routes = Vec::new();
    for op in wire::OPS {
        let request = request_schema(op, &mut requests).map(Schema::to_value);
        let reply = reply_schema(op, &mut replies).map(Schema::to_value);
        routes.push((*op, request, reply));
    }

    // The two contracts name their schemas alike: where a type's two
    // schemas differ, the reply's gets a name of its own.
    let mut schemas = requests.take_definitions(true);
    let reply_schemas = replies.take_definitions(true);
    let renamed: BTreeMap<String, String> = reply_schemas
        .iter()
        .filter(|(name, schema)| schemas.get(*name).is_some_and(|s| s != *schema))
        .map(|(name, _)| (name.clone(), format!("{name}Sent")))
        .collect();
    for (name, mut schema) in reply_schemas {
        rename_refs(&mut schema, &renamed);
        let name = renamed.get(&name).cloned().unwrap_or(name);
        schemas.insert(name, schema);
    }
    let mut error = error;
    rename_refs(&mut error, &renamed);

    let mut paths = Map::new();
    for (op, request, reply) in routes {
        let mut reply = reply;
        if let Some(r) = reply.as_mut() {
            rename_refs(r, &renamed);
        }
        let mut methods = Map::new();
        let mut post = operation(op, op, reply.as_ref());
        if let Some(request) = request {
            // An empty body means `{}`: the body is required exactly when
            // `{}` is not a request of the route.
            let required = Request::decode(op, b"").is_err();
            post.insert(
                "requestBody".into(),
                json!({
                    "required": required,
                    "content": {"application/json": {"schema": request}},
                }),
            );
        }
        methods.insert("post".into(), Value::Object(post));
        if Request::is_read_only_op(op) && Request::decode(op, b"").is_ok() {
            let mut get = operation(op, &format!("{op}_get"), reply.as_ref());
            get.insert(
                "description".into(),
                "The GET form: no body, as `{}` (SPEC section 10).".into(),
            );
            methods.insert("get".into(), Value::Object(get));
        }
        paths.insert(format!("{}/{op}", wire::PREFIX), Value::Object(methods));
    }
    paths.insert(
        format!("{}/openapi.json", wire::PREFIX),
        json!({"get": {
            "summary": "This document (OpenAPI 3.1), generated from the wire types.",
            "operationId": "openapi",
            "responses": {"200": {
                "description": "the OpenAPI document",
                "content": {"application/json": {"schema": {"type": "object"}}},
            }},
        }}),
    );
    #[cfg(feature = "dashboard")]
    paths.insert(
        "/metrics".into(),
        json!({"get": {
            "summary": "Every metric in Prometheus text format (SPEC 12.3).",
            "operationId": "metrics",
            "responses": {
                "200": {
                    "description": "Prometheus text exposition format",
                    "content": {"text/plain": {"schema": {"type": "string"}}},
                },
                "401": error_ref(401),
            },
        }}),
    );

    let responses: Map<String, Value> = error_statuses()
        .into_iter()
        .map(|status| (error_name(status), error_response(status, &error)))
        .collect();
    let mut doc = json!({
        "openapi": "3.1.0",
        "info": {
            "title": "workjournal serve",
            "version": "1",
            "description": "The WorkQueue contract (docs/SPEC.md) over HTTP/1.1 + JSON. Every operation is POST /v1/<op> with a JSON object body; an empty body means {}. Payloads are standard base64. Over a Unix socket the peer's uid is checked; over TCP send Authorization: Bearer <token>. Clients must ignore reply fields they do not know. See docs/API.md.",
        },
        "servers": [{
            "url": "http://localhost",
            "description": "over the Unix socket (curl --unix-socket PATH)",
        }],
        "security": [{}, {"bearer": []}],
        "components": {
            "securitySchemes": {"bearer": {
                "type": "http",
                "scheme": "bearer",
                "description": "required over TCP only",
            }},
            "schemas": schemas,
            "responses": responses,
        },
        "paths": paths,
    });
    add_integer_bounds(&mut doc);
    doc
}

/// One operation of `op`: its summary, its 200 reply and every error
/// reply, each status its own entry of `responses`.
fn operation(op: &str, id: &str, reply: Option<&Value>) -> Map<String, Value> {
    let mut responses = Map::new();
    let mut ok = json!({"description": "the result"});
    if let Some(reply) = reply {
        ok["content"] = json!({"application/json": {"schema": reply}});
    }
    responses.insert("200".into(), ok);
    for status in error_statuses() {
        // Every route here exists: an unknown one is the only 404.
        if status != 404 {
            responses.insert(status.to_string(), error_ref(status));
        }
    }
    let mut o = Map::new();
    o.insert("summary".into(), summary(op).into());
    o.insert("operationId".into(), id.into());
    o.insert("responses".into(), Value::Object(responses));
    o
}

/// The name of the error reply of `status` in `components/responses`.
fn error_name(status: u16) -> String {
    format!("Error{status}")
}

/// A reference to the error reply of `status`.
fn error_ref(status: u16) -> Value {
    json!({"$ref": format!("#/components/responses/{}", error_name(status))})
}

/// Every status an error reply has, in order.
fn error_statuses() -> Vec<u16> {
    let mut statuses: Vec<u16> = ERROR_KINDS
        .iter()
        .map(|(kind, _)| ErrorBody::plain(kind, "").status())
        .collect();
    statuses.sort_unstable();
    statuses.dedup();
    statuses
}

/// The error reply of `status`: the error schema with `kind` one of the
/// kinds of that status.
fn error_response(status: u16, error: &Value) -> Value {
    let kinds: Vec<(&str, &str)> = ERROR_KINDS
        .iter()
        .copied()
        .filter(|(kind, _)| ErrorBody::plain(kind, "").status() == status)
        .collect();
    let description = kinds
        .iter()
        .map(|(kind, meaning)| format!("`{kind}`: {meaning}"))
        .collect::<Vec<_>>()
        .join("; ");
    let names: Vec<&str> = kinds.iter().map(|(kind, _)| *kind).collect();
    json!({
        "description": description,
        "content": {"application/json": {"schema": {
            "allOf": [
                error,
                {"properties": {"error": {"properties": {"kind": {"enum": names}}}}},
            ],
        }}},
    })
}

/// The request body type of route `op`, as [`Request::decode`] reads it.
fn request_schema(op: &str, g: &mut SchemaGenerator) -> Option<Schema> {
    use wire::*;
    Some(match op {
        "add" => g.subschema_for::<WireNewItem>(),
        "add_batch" => g.subschema_for::<AddBatchRequest>(),
        "add_delayed" => g.subschema_for::<AddDelayedRequest>(),
        "next_due" | "promote_due" | "paused_flows" | "purge_dead_letters" | "stats" | "now"
        | "compact" | "max_deliveries" | "flow_limits" => g.subschema_for::<EmptyRequest>(),
        "claim" => g.subschema_for::<ClaimRequest>(),
        "ack" | "park" => g.subschema_for::<ReceiptRequest>(),
        "ack_batch" | "touch" => g.subschema_for::<ReceiptsRequest>(),
        "retry" | "release" => g.subschema_for::<RetryRequest>(),
        "dead_letter" => g.subschema_for::<DeadLetterRequest>(),
        "reclaim" | "reclaim_stale" => g.subschema_for::<ReclaimRequest>(),
        "pause" | "resume" | "step" | "clear_flow" | "parked" => g.subschema_for::<FlowRequest>(),
        "mark_done" | "was_done" => g.subschema_for::<DoneRequest>(),
        "dead_letters" | "peek" => g.subschema_for::<CountRequest>(),
        "redrive" | "outcome" | "progress" | "find" | "promote" | "remove" | "cancel" => {
            g.subschema_for::<IdRequest>()
        }
        "backlog_by_flow" => g.subschema_for::<SampleRequest>(),
        "ack_with_result" => g.subschema_for::<AckWithResultRequest>(),
        "wait_outcome" => g.subschema_for::<WaitOutcomeRequest>(),
        "wait_cancelled" => g.subschema_for::<WaitCancelledRequest>(),
        "update" => g.subschema_for::<UpdateRequest>(),
        "set_progress" => g.subschema_for::<SetProgressRequest>(),
        "send_chunk" => g.subschema_for::<SendChunkRequest>(),
        "wait_chunks" => g.subschema_for::<WaitChunksRequest>(),
        "forward_lag" => g.subschema_for::<ForwardLagRequest>(),
        "set_flow_limit" => g.subschema_for::<SetFlowLimitRequest>(),
        "list" => g.subschema_for::<ListRequest>(),
        "back_off" => g.subschema_for::<BackOffRequest>(),
        "upsert_schedule" => g.subschema_for::<UpsertScheduleRequest>(),
        "remove_schedule" | "pause_schedule" | "resume_schedule" => {
            g.subschema_for::<ScheduleNameRequest>()
        }
        "schedules" | "fire_schedules" => g.subschema_for::<EmptyRequest>(),
        "preview_schedule" => g.subschema_for::<PreviewScheduleRequest>(),
        _ => return None,
    })
}

/// The 200 reply type of route `op`: [`wire::decode_reply`]'s, and the
/// server's own for the routes that are not a queue call.
fn reply_schema(op: &str, g: &mut SchemaGenerator) -> Option<Schema> {
    use wire::*;
    Some(match op {
        "ack" | "ack_with_result" | "set_progress" | "touch" | "release" | "dead_letter"
        | "pause" | "park" | "set_flow_limit" | "back_off" | "mark_done" => {
            g.subschema_for::<Done>()
        }
        "add" | "add_delayed" => g.subschema_for::<WireAdded>(),
        "add_batch" => g.subschema_for::<AddedList>(),
        "next_due" => g.subschema_for::<NextDue>(),
        "promote_due" | "ack_batch" | "resume" | "clear_flow" | "parked" | "purge_dead_letters"
        | "max_deliveries" => g.subschema_for::<Count>(),
        "promote" | "was_done" | "redrive" | "remove" | "update" | "compact" => {
            g.subschema_for::<Flag>()
        }
        "claim" | "reclaim_stale" => g.subschema_for::<ClaimedList>(),
        "step" => g.subschema_for::<Stepped>(),
        "retry" => g.subschema_for::<Retried>(),
        "reclaim" => g.subschema_for::<ReclaimedList>(),
        "cancel" => g.subschema_for::<CancelReply>(),
        "wait_cancelled" => g.subschema_for::<IdList>(),
        "outcome" | "wait_outcome" => g.subschema_for::<OutcomeReply>(),
        "progress" => g.subschema_for::<ProgressReply>(),
        "send_chunk" => g.subschema_for::<Seq>(),
        "wait_chunks" => g.subschema_for::<ChunkList>(),
        "paused_flows" => g.subschema_for::<Flows>(),
        "flow_limits" => g.subschema_for::<LimitsReply>(),
        "dead_letters" => g.subschema_for::<DeadLetterList>(),
        "stats" => g.subschema_for::<WireStats>(),
        "backlog_by_flow" => g.subschema_for::<FlowCounts>(),
        "peek" => g.subschema_for::<ItemList>(),
        "list" => g.subschema_for::<ItemPageReply>(),
        "find" => g.subschema_for::<FoundReply>(),
        "now" => g.subschema_for::<Now>(),
        "forward_lag" => g.subschema_for::<ForwardLagReply>(),
        "upsert_schedule" | "remove_schedule" | "pause_schedule" | "resume_schedule" => {
            g.subschema_for::<Flag>()
        }
        "schedules" => g.subschema_for::<ScheduleList>(),
        "preview_schedule" => g.subschema_for::<Times>(),
        "fire_schedules" => g.subschema_for::<FiredReply>(),
        _ => return None,
    })
}

/// Point every `$ref` to a renamed schema at its new name.
fn rename_refs(value: &mut Value, renamed: &BTreeMap<String, String>) {
    match value {
        Value::Object(map) => {
            for (key, v) in map.iter_mut() {
                if key == "$ref"
                    && let Value::String(target) = v
                    && let Some(name) = target.strip_prefix(&format!("#{SCHEMAS}/"))
                    && let Some(new) = renamed.get(name)
                {
                    *target = format!("#{SCHEMAS}/{new}");
                } else {
                    rename_refs(v, renamed);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| rename_refs(v, renamed)),
        _ => {}
    }
}

/// Give the unsigned integers their upper bound too (schemars gives
/// `u8` and `u16` theirs): a larger number is refused with 400
/// `bad_request` (SPEC section 10, numbers out of range).
fn add_integer_bounds(value: &mut Value) {
    match value {
        Value::Object(map) => {
            let max = match map.get("format").and_then(Value::as_str) {
                Some("uint32") => Some(u64::from(u32::MAX)),
                Some("uint64") => Some(u64::MAX),
                Some("uint") => u64::try_from(usize::MAX).ok(),
                _ => None,
            };
            if let Some(max) = max
                && map.get("type").is_some()
                && !map.contains_key("maximum")
            {
                map.insert("maximum".into(), max.into());
            }
            map.values_mut().for_each(add_integer_bounds);
        }
        Value::Array(items) => items.iter_mut().for_each(add_integer_bounds),
        _ => {}
    }
}

/// One line on what route `op` does.
fn summary(op: &str) -> &'static str {
    match op {
        "add" => "Journal one item at the backlog tail.",
        "add_batch" => "Journal all items, all or none.",
        "add_delayed" => "Journal one item into delayed, due at not_before_ms.",
        "next_due" => "The soonest due time among delayed items.",
        "promote_due" => "Move due delayed items to the due lane.",
        "claim" => {
            "Take up to count items; long-polls up to wait_ms (at most the server's max_wait per request)."
        }
        "ack" => "The item is done and gone.",
        "ack_batch" => "Ack each receipt; returns how many were current.",
        "touch" => "Extend the leases, all or nothing.",
        "retry" => {
            "Give the item back, due at not_before_ms (or dead-letter it past max_deliveries)."
        }
        "release" => {
            "Give the claim back, due at not_before_ms, without spending its delivery (never dead-letters)."
        }
        "dead_letter" => "Move the pending item to the dead letters.",
        "reclaim" => {
            "Take over claims idle for min_idle_ms; also name the stale claims dead-lettered past max_deliveries."
        }
        "reclaim_stale" => "Take over claims idle for min_idle_ms.",
        "pause" => "Pause a flow.",
        "resume" => "Unpause a flow; parked items go back to the backlog.",
        "park" => "Move a pending item to its flow's parked list.",
        "step" => "Claim the oldest parked item of a flow.",
        "clear_flow" => "Delete a flow's parked items and pause.",
        "parked" => "How many items a flow has parked.",
        "paused_flows" => "The paused flows, sorted.",
        "mark_done" => "Remember that step of item id happened.",
        "was_done" => "Whether step of item id was marked done within done_ttl.",
        "dead_letters" => "Up to count dead letters, newest first.",
        "redrive" => "Move dead letter id back to the backlog.",
        "purge_dead_letters" => "Delete every dead letter.",
        "stats" => "Exact counts of every state.",
        "backlog_by_flow" => "Count by flow over the next sample items.",
        "peek" => "The next count items a claim would hand out.",
        "now" => "The queue clock, ms since the Unix epoch.",
        "compact" => "Give free file space back.",
        "max_deliveries" => {
            "The served queue's max_deliveries: what a Worker over the socket dead-letters at (RemoteQueue reads it when it connects)."
        }
        "ack_with_result" => {
            "Ack with a result: the item is done and gone, and its outcome keeps the result for result_ttl."
        }
        "outcome" => {
            "How item id finished, or null (not finished, or finished longer ago than result_ttl)."
        }
        "wait_outcome" => {
            "outcome, long-polling up to wait_ms (at most the server's max_wait per request) for it to exist."
        }
        "cancel" => {
            "Cancel item id (SPEC 3, Cancelling): a waiting item ends as cancelled (ended), a pending one is marked for its holder (marked); not_found when the queue holds no such item; invalid_input for a dead letter."
        }
        "update" => {
            "Change waiting item id's priority, not_before_ms or payload (SPEC 3, Updating): a new tier re-ranks it in place, a new time makes it delayed or due. false when the queue holds no such item; invalid_input for a pending, dead-lettered or finished item, a time for a parked one, or an empty update."
        }
        "wait_cancelled" => {
            "The ids among ids that are pending and marked cancelled, long-polling up to wait_ms (at most the server's max_wait per request) while none is."
        }
        "set_progress" => {
            "Publish progress for a held item (the latest is kept); lease_lost for a stale receipt."
        }
        "send_chunk" => {
            "Append a chunk to a held item's stream; lease_lost for a stale receipt. Replies its seq."
        }
        "progress" => "The latest progress of item id, or null.",
        "wait_chunks" => {
            "The chunks of item id after after_seq, long-polling up to wait_ms (at most the server's max_wait per request) until there are some or the item has finished."
        }
        "forward_lag" => {
            "The forwarding lag of the served queue file (SPEC 11): items of the counted flows waiting to be handed over to Redis and the age of the oldest; lag null when the served queue cannot know (not a queue file)."
        }
        "set_flow_limit" => {
            "Set, change or clear one of a flow's limits: rate limit, concurrency cap or back-off (SPEC 3, Flow limits)."
        }
        "flow_limits" => {
            "Every flow with a limit in force, by name, with its state (SPEC 3, Flow limits)."
        }
        "list" => {
            "One page of the items in one state (SPEC 12.1): at most 500 items; with contains, at most 5000 positions looked at."
        }
        "find" => "Item id with its state (SPEC 12.1), or null.",
        "promote" => "Make delayed item id due now (false: no delayed item id).",
        "remove" => {
            "Delete item id unrun: waiting, delayed, parked or dead (false: no such item; 400 invalid_input: it is pending)."
        }
        "back_off" => "Hold flow for duration_ms from now, keeping a longer hold in force.",
        "upsert_schedule" => {
            "Create or replace a schedule by name, keeping its progress (SPEC 13); true: created."
        }
        "remove_schedule" => {
            "Delete a schedule; its items stay (SPEC 13). False: no such schedule."
        }
        "pause_schedule" => "Pause a schedule: no slot fires until it is resumed (SPEC 13).",
        "resume_schedule" => {
            "Resume a schedule from its first slot at or after now; the paused slots are not caught up (SPEC 13)."
        }
        "schedules" => {
            "Every schedule with its next fire time, last fired slot and counts (SPEC 13)."
        }
        "preview_schedule" => "The next count fire times of a schedule, ms (SPEC 13).",
        "fire_schedules" => {
            "Fire every due schedule, each slot exactly once (SPEC 13); a served queue fires them itself."
        }
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every route has its summary, its request body and its 200 reply,
    /// and the document is the one served.
    #[test]
    fn every_route_has_a_summary_a_body_and_a_reply() {
        let doc: Value = serde_json::from_str(openapi_json()).unwrap();
        for op in wire::OPS {
            assert!(!summary(op).is_empty(), "{op} has no summary");
            let post = &doc["paths"][format!("/v1/{op}")]["post"];
            assert!(
                post["requestBody"]["content"]["application/json"]["schema"].is_object(),
                "{op} has no request schema"
            );
            assert!(
                post["responses"]["200"]["content"]["application/json"]["schema"].is_object(),
                "{op} has no reply schema"
            );
        }
    }

    /// Every `$ref` names a schema or a response of the document.
    #[test]
    fn every_reference_resolves() {
        fn refs<'a>(v: &'a Value, out: &mut Vec<&'a str>) {
            match v {
                Value::Object(m) => {
                    if let Some(Value::String(r)) = m.get("$ref") {
                        out.push(r);
                    }
                    m.values().for_each(|v| refs(v, out));
                }
                Value::Array(a) => a.iter().for_each(|v| refs(v, out)),
                _ => {}
            }
        }
        let doc = openapi_document();
        let mut found = Vec::new();
        refs(&doc, &mut found);
        assert!(!found.is_empty());
        for r in found {
            let target = doc.pointer(r.strip_prefix('#').unwrap());
            assert!(target.is_some_and(Value::is_object), "{r} names nothing");
        }
    }

    /// Each error status names exactly the kinds `ErrorBody::status` gives
    /// it, and every status has one.
    #[test]
    fn error_responses_follow_the_status_table() {
        let doc = openapi_document();
        let ack = &doc["paths"]["/v1/ack"]["post"]["responses"];
        assert_eq!(ack["409"]["$ref"], "#/components/responses/Error409");
        assert!(ack.get("404").is_none());
        let kinds = |status: &str| {
            let schema = &doc["components"]["responses"][format!("Error{status}")]["content"]["application/json"]
                ["schema"]["allOf"][1];
            schema["properties"]["error"]["properties"]["kind"]["enum"].clone()
        };
        assert_eq!(kinds("409"), json!(["lease_lost"]));
        assert_eq!(kinds("500"), json!(["io", "storage", "corrupt", "decode"]));
        assert_eq!(
            error_statuses(),
            vec![400, 401, 403, 404, 408, 409, 413, 423, 429, 500, 502, 503]
        );
    }
}
