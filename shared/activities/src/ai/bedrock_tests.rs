//! Unit tests of the `bedrock` provider kind: its entries per backend, the registration
//! refusal where no Bedrock provider serves a node, and invocations through an attached
//! [`ModelBackend`](crate::ai::provider::ModelBackend).

use serde_json::json;

use super::*;

fn parse(document: &Value, backend: Backend) -> Result<Providers, ProviderConfigError> {
    parse_providers_for(&document.to_string(), backend)
}

#[test]
fn bedrock_entries_parse_on_aws_only() {
    let document = json!([{"id": "br", "kind": "bedrock", "region": "eu-west-1", "default": true,
        "models": [{"id": "anthropic.claude-3-haiku-20240307-v1:0", "inputUsdPerMTok": 0.25, "outputUsdPerMTok": 1.25}],
        "policy": {"mode": "restricted", "allowedModels": ["anthropic.*"]}}]);
    let providers = parse(&document, Backend::Aws).expect("parses on AWS");
    let provider = providers.get("br").expect("configured");
    assert_eq!(
        (provider.kind, provider.region.as_deref(), provider.base_url.as_str()),
        (ProviderKind::Bedrock, Some("eu-west-1"), "")
    );
    assert!(matches!(provider.key, ProviderKey::None) && provider.backend.is_none());
    assert!(providers.has_kind(ProviderKind::Bedrock));
    let embedded = parse_providers(&document.to_string()).unwrap_err();
    assert_eq!(embedded.field, "providers[0].kind");
    assert_eq!(embedded.rule, "bedrock providers need the AWS backend");
}

#[test]
fn bedrock_entries_take_no_base_url_key_or_byok_policy() {
    let cases = [
        (json!({"baseUrl": "https://bedrock.example"}), "providers[0].baseUrl"),
        (json!({"credentialsRef": "aws-key"}), "providers[0].credentialsRef"),
        (json!({"policy": {"mode": "required"}}), "providers[0].policy.mode"),
        (json!({"region": "US EAST"}), "providers[0].region"),
    ];
    for (extra, field) in cases {
        let mut entry = json!({"id": "br", "kind": "bedrock", "models": ["m"]});
        entry.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        let error = parse(&json!([entry]), Backend::Aws).unwrap_err();
        assert_eq!(error.field, field, "{error}");
    }
    let region_on_openai =
        json!([{"id": "o", "kind": "openai", "baseUrl": "http://127.0.0.1:1", "models": ["m"], "region": "us-east-1"}]);
    assert_eq!(parse(&region_on_openai, Backend::Aws).unwrap_err().field, "providers[0].region");
}

#[test]
fn a_node_naming_bedrock_is_refused_where_no_bedrock_provider_serves_it() {
    use trellis_core::activity::Activity;
    use trellis_core::interrupt::request::ConfigIssue;
    let node = |providers: Providers| {
        crate::ai::CallPromptActivity::new(crate::http::HttpClient::system(Default::default()), providers, None, false)
    };
    let config = |value: Value| value.as_object().cloned().unwrap();
    let by_id = config(json!({"provider": "bedrock", "prompt": "hi"}));
    let by_arn =
        config(json!({"model": "arn:aws:bedrock:us-east-1::foundation-model/amazon.nova-micro-v1:0", "prompt": "hi"}));
    let refused = Err(ConfigIssue::Capability(crate::ai::BEDROCK_CAPABILITY));
    let embedded = node(Providers::none());
    assert_eq!(embedded.check("ask", &by_id), refused);
    assert_eq!(embedded.check("ask", &by_arn), refused);
    // Another unknown id stays a run-time `provider_not_supported`, as before.
    assert_eq!(embedded.check("ask", &config(json!({"provider": "other", "prompt": "hi"}))), Ok(()));
    let document = json!([{"id": "bedrock", "kind": "bedrock", "models": ["amazon.nova-micro-v1:0"]}]);
    let aws = node(parse(&document, Backend::Aws).unwrap());
    assert_eq!(aws.check("ask", &by_id), Ok(()));
    assert_eq!(aws.check("ask", &by_arn), Ok(()));
    let byok = aws.capabilities().into_iter().find(|(name, _)| *name == "aiProviders").unwrap().1;
    assert_eq!((byok["supported"].clone(), byok["byok"].clone()), (json!(["bedrock"]), json!([])));
}

/// A backend answering `deltas`, streamed or whole.
#[derive(Debug)]
struct Scripted(Vec<&'static str>);

impl Scripted {
    fn answer(&self) -> crate::ai::provider::Answer {
        crate::ai::provider::Answer {
            text: self.0.concat(),
            finish_reason: "stop".to_owned(),
            input_tokens: Some(3),
            output_tokens: Some(self.0.len() as u64),
            ..Default::default()
        }
    }
}

#[async_trait::async_trait]
impl crate::ai::provider::ModelBackend for Scripted {
    async fn converse(
        &self,
        _invocation: &crate::ai::provider::Invocation<'_>,
    ) -> Result<crate::ai::provider::Answer, crate::ai::provider::Failure> {
        Ok(self.answer())
    }

    async fn converse_stream(
        &self,
        _invocation: &crate::ai::provider::Invocation<'_>,
        sink: &mut dyn crate::ai::provider::DeltaSink,
    ) -> Result<crate::ai::provider::Answer, crate::ai::provider::Failure> {
        for delta in &self.0 {
            if !sink.delta(delta).await {
                return Err(trellis_core::activity::ActivityError::abandoned().into());
            }
        }
        Ok(self.answer())
    }
}

#[derive(Default)]
struct Chunks(std::sync::Mutex<Vec<Value>>);

#[async_trait::async_trait]
impl trellis_core::activity::ProgressSink for Chunks {
    async fn report(&self, progress: trellis_core::activity::Progress) -> bool {
        if let trellis_core::activity::Progress::Chunk { data } = progress {
            self.0.lock().unwrap().push(data);
        }
        true
    }
}

#[tokio::test]
async fn bedrock_invocations_go_through_the_attached_backend_and_stream_in_batches() {
    use crate::ai::provider::{invoke, Invocation, Turn};
    let document = json!([{"id": "br", "kind": "bedrock", "models": ["m"]}]);
    let mut providers = parse(&document, Backend::Aws).unwrap();
    let client = crate::http::HttpClient::system(Default::default());
    let messages = [json!({"role": "user", "content": "hi"})];
    let invocation = |provider, stream, tools: &'static [Value]| Invocation {
        provider,
        key: None,
        turn: Turn { model: "m", messages: &messages, temperature: None, max_tokens: None, schema: None, tools },
        stream,
        idempotency_key: "i",
        request_key: "r",
        attempt: 0,
        deadline: std::time::Instant::now() + std::time::Duration::from_secs(5),
    };
    // No backend attached (the embedded host never attaches one): not supported.
    let sink = Chunks::default();
    let bare = parse(&document, Backend::Aws).unwrap();
    let failure = invoke(&client, &invocation(bare.get("br").unwrap(), false, &[]), &sink).await.unwrap_err();
    assert_eq!(failure.error.code, "provider_not_supported");

    let deltas: Vec<&'static str> = (0..50).map(|index| if index % 2 == 0 { "a " } else { "b " }).collect();
    providers.attach_backend(ProviderKind::Bedrock, std::sync::Arc::new(Scripted(deltas.clone())));
    let provider = providers.get("br").unwrap();
    let answer = invoke(&client, &invocation(provider, true, &[]), &sink).await.unwrap();
    assert_eq!(answer.text, deltas.concat());
    let chunks = std::mem::take(&mut *sink.0.lock().unwrap());
    let parts: Vec<String> = chunks
        .iter()
        .flat_map(|chunk| chunk["parts"].as_array().cloned().unwrap_or_default())
        .map(|part| part.as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(parts.concat(), deltas.concat(), "every delta, in order");
    let last = chunks.last().unwrap();
    assert_eq!((last["isLast"].clone(), last["meta"]["provider"].clone()), (json!(true), json!("br")));
    assert_eq!(last["meta"]["usage"]["completionTokens"], 50);

    // Not streamed: no chunk. Streamed with tools: the whole answer as one final batch.
    invoke(&client, &invocation(provider, false, &[]), &sink).await.unwrap();
    assert!(sink.0.lock().unwrap().is_empty());
    static TOOLS: [Value; 1] = [Value::Null];
    invoke(&client, &invocation(provider, true, &TOOLS), &sink).await.unwrap();
    assert_eq!(sink.0.lock().unwrap().len(), 1);
}
