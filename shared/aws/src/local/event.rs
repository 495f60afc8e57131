//! API Gateway REST proxy events built from an incoming HTTP request, as API Gateway sends
//! them to a `{proxy+}` resource on a stage: the event's `path` without the stage,
//! `requestContext.path` with it (when called through the default execute-api URL),
//! `requestContext.stage`, `headers` (last value of each) and `multiValueHeaders` (all
//! values), the query string in both forms with form-decoded keys and values, and the body
//! as text, or base64 (`isBase64Encoded`) when it is not UTF-8.
//!
//! The path is passed as received (API Gateway decodes it; the API's path segments — run
//! ids, node ids, tokens — never need decoding). With `AWS_LAMBDA_HTTP_IGNORE_STAGE_IN_PATH`
//! set, as on the `api` function, `lambda_http` routes on the path without the stage.

use std::collections::BTreeMap;

use base64::Engine;
use lambda_http::http::HeaderMap;
use serde_json::{json, Map, Value};

/// One HTTP request as the proxy event needs it.
#[derive(Debug, Clone, Copy)]
pub struct IncomingRequest<'a> {
    /// The method (`GET`, `POST`, …).
    pub method: &'a str,
    /// The path below the stage, starting with `/` (`/v1/runs`).
    pub path: &'a str,
    /// The raw query string, without `?` (empty for none).
    pub query: &'a str,
    /// The request's headers.
    pub headers: &'a HeaderMap,
    /// The body's bytes.
    pub body: &'a [u8],
    /// The API Gateway stage (`v`).
    pub stage: &'a str,
    /// Whether the client called the stage in the path (the default execute-api URL:
    /// `requestContext.path` is `/{stage}{path}`) rather than a custom domain's base path
    /// mapping (`requestContext.path` is `path`).
    pub stage_in_path: bool,
    /// The client's address (`requestContext.identity.sourceIp`).
    pub source_ip: &'a str,
}

/// An event `lambda_http` could not turn into a request.
#[derive(Debug, thiserror::Error)]
#[error("the proxy event does not parse as an API Gateway request: {0}")]
pub struct EventError(String);

/// The REST proxy event of `request` (JSON, as API Gateway sends it).
pub fn proxy_event(request: &IncomingRequest<'_>) -> Value {
    let mut single = Map::new();
    let mut multi: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (name, value) in request.headers {
        let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
        single.insert(name.as_str().to_owned(), Value::String(value.clone()));
        multi.entry(name.as_str().to_owned()).or_default().push(value);
    }
    let (query_single, query_multi) = query_parameters(request.query);
    let (body, base64) = match request.body {
        [] => (Value::Null, false),
        bytes => match std::str::from_utf8(bytes) {
            Ok(text) => (Value::String(text.to_owned()), false),
            Err(_) => (Value::String(base64::engine::general_purpose::STANDARD.encode(bytes)), true),
        },
    };
    let host = request.headers.get("host").and_then(|value| value.to_str().ok());
    json!({
        "resource": "/{proxy+}",
        "path": request.path,
        "httpMethod": request.method,
        "headers": single,
        "multiValueHeaders": multi,
        "queryStringParameters": query_single,
        "multiValueQueryStringParameters": query_multi,
        "pathParameters": {"proxy": request.path.trim_start_matches('/')},
        "stageVariables": null,
        "requestContext": {
            "resourcePath": "/{proxy+}",
            "httpMethod": request.method,
            "path": if request.stage_in_path { format!("/{}{}", request.stage, request.path) } else { request.path.to_owned() },
            "stage": request.stage,
            "requestId": uuid::Uuid::new_v4().to_string(),
            "identity": {"sourceIp": request.source_ip},
            "accountId": "000000000000",
            "apiId": "local",
            "domainName": host,
            "protocol": "HTTP/1.1",
        },
        "body": body,
        "isBase64Encoded": base64,
    })
}

/// `queryStringParameters` (the last value of each key) and `multiValueQueryStringParameters`
/// (every value), keys and values form-decoded as API Gateway decodes them (`%20` and `+`
/// are spaces); both `null` without a query.
fn query_parameters(query: &str) -> (Value, Value) {
    let mut single = Map::new();
    let mut multi: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (key, value) in form_urlencoded::parse(query.as_bytes()) {
        let (key, value) = (key.into_owned(), value.into_owned());
        single.insert(key.clone(), Value::String(value.clone()));
        multi.entry(key).or_default().push(value);
    }
    if single.is_empty() {
        return (Value::Null, Value::Null);
    }
    (Value::Object(single), json!(multi))
}

/// `request` as the `api` function receives it: the proxy event parsed by `lambda_http`
/// (request context, query and path parameters in the request's extensions).
pub fn proxy_request(request: &IncomingRequest<'_>) -> Result<lambda_http::Request, EventError> {
    lambda_http::request::from_str(&proxy_event(request).to_string()).map_err(|error| EventError(error.to_string()))
}

#[cfg(test)]
mod tests {
    use lambda_http::http::HeaderValue;

    use super::*;

    fn request<'a>(headers: &'a HeaderMap, query: &'a str, body: &'a [u8]) -> IncomingRequest<'a> {
        IncomingRequest {
            method: "POST",
            path: "/v1/runs",
            query,
            headers,
            body,
            stage: "v",
            stage_in_path: true,
            source_ip: "127.0.0.1",
        }
    }

    #[test]
    fn the_event_has_the_stage_in_the_context_path_only_and_both_query_forms_decoded() {
        let mut headers = HeaderMap::new();
        headers.insert("host", HeaderValue::from_static("localhost:8080"));
        headers.append("x-tag", HeaderValue::from_static("a"));
        headers.append("x-tag", HeaderValue::from_static("b"));
        let event = proxy_event(&request(&headers, "name=a%20b&tag=1&tag=2&flag", b"{}"));
        assert_eq!(event["path"], "/v1/runs");
        assert_eq!(event["requestContext"]["path"], "/v/v1/runs");
        assert_eq!(event["requestContext"]["stage"], "v");
        assert_eq!(event["headers"]["x-tag"], "b");
        assert_eq!(event["multiValueHeaders"]["x-tag"], json!(["a", "b"]));
        assert_eq!(event["queryStringParameters"], json!({"name": "a b", "tag": "2", "flag": ""}));
        assert_eq!(event["multiValueQueryStringParameters"]["tag"], json!(["1", "2"]));
        // As API Gateway REST (and the embedded host's form decoding): `+` is a space, `%2B` a plus.
        let plus = proxy_event(&request(&headers, "q=a+b%2Bc&a+key=x", b""));
        assert_eq!(plus["queryStringParameters"], json!({"q": "a b+c", "a key": "x"}));
        assert_eq!(event["body"], "{}");
        assert_eq!(event["isBase64Encoded"], false);
    }

    #[test]
    fn a_binary_body_is_base64_and_no_query_is_null() {
        let headers = HeaderMap::new();
        let event = proxy_event(&request(&headers, "", &[0xff, 0x00]));
        assert_eq!(event["isBase64Encoded"], true);
        assert_eq!(event["body"], "/wA=");
        assert_eq!(event["queryStringParameters"], Value::Null);
        let parsed = proxy_request(&request(&headers, "", &[0xff, 0x00])).expect("parses");
        assert_eq!(parsed.body().as_ref(), &[0xff, 0x00]);
    }
}
