//! Executing the run's mock provider (`configurable.mockProvider`, see
//! [`trellis_core::ai::mock`]): no provider is contacted and none need be configured.
//!
//! - `stream-text` streams its tokens (after `delayMsPerToken` each) in batches as a real
//!   stream is, answers their concatenation and reports usage `{provider: "mock", model,
//!   promptTokens, completionTokens}`;
//! - `error` waits `failAfterMs`, then fails the attempt with its code, message and
//!   `retryable`;
//! - `usage-only` reports its usage and answers an empty text.

use std::time::{Duration, Instant};

use serde_json::json;
use trellis_core::activity::{ActivityError, Progress, ProgressSink};
use trellis_core::ai::mock::MockProvider;
use trellis_core::ai::usage::ProviderUsage;

use super::provider::Answer;
use super::stream::Batcher;

/// The provider id mock usage is reported under.
pub const PROVIDER: &str = "mock";

/// The usage report of a mock answer.
pub fn usage(model: &str, input: u64, output: u64) -> ProviderUsage {
    ProviderUsage {
        provider: PROVIDER.to_owned(),
        model: model.to_owned(),
        input_tokens: input,
        output_tokens: output,
        cost_estimate_usd: None,
        cache_hit: None,
        cache_read_tokens: None,
        cache_write_tokens: None,
    }
}

/// Answers one call with `mock`; reports its chunks (when `stream`) and its usage.
pub async fn answer(mock: &MockProvider, stream: bool, progress: &dyn ProgressSink) -> Result<Answer, ActivityError> {
    match mock {
        MockProvider::StreamText {
            tokens,
            delay_ms_per_token,
            finish_reason,
            prompt_tokens,
            completion_tokens,
            model,
        } => {
            let mut batcher = Batcher::new();
            for token in tokens {
                if *delay_ms_per_token > 0 {
                    tokio::time::sleep(Duration::from_millis(*delay_ms_per_token)).await;
                }
                if let Some(batch) = batcher.push(token, Instant::now()) {
                    if stream && !progress.report(Progress::Chunk { data: batch.to_value() }).await {
                        return Err(ActivityError::abandoned());
                    }
                }
            }
            let text = batcher.text().to_owned();
            let meta = json!({
                "finishReason": finish_reason,
                "usage": { "promptTokens": prompt_tokens, "completionTokens": completion_tokens,
                           "totalTokens": prompt_tokens + completion_tokens },
                "model": model,
                "provider": PROVIDER,
            });
            let last = batcher.finish(meta);
            if stream {
                progress.report(Progress::Chunk { data: last.to_value() }).await;
            }
            if !progress.report(Progress::Usage(usage(model, *prompt_tokens, *completion_tokens))).await {
                return Err(ActivityError::abandoned());
            }
            Ok(Answer {
                text,
                finish_reason: finish_reason.clone(),
                model: Some(model.clone()),
                input_tokens: Some(*prompt_tokens),
                output_tokens: Some(*completion_tokens),
                ..Answer::default()
            })
        }
        MockProvider::Error { code, message, retryable, fail_after_ms } => {
            if *fail_after_ms > 0 {
                tokio::time::sleep(Duration::from_millis(*fail_after_ms)).await;
            }
            Err(ActivityError::new(code, message.clone(), *retryable).with_details(json!({ "provider": PROVIDER })))
        }
        MockProvider::UsageOnly { prompt_tokens, completion_tokens, model } => {
            if !progress.report(Progress::Usage(usage(model, *prompt_tokens, *completion_tokens))).await {
                return Err(ActivityError::abandoned());
            }
            Ok(Answer {
                text: String::new(),
                finish_reason: "stop".to_owned(),
                model: Some(model.clone()),
                input_tokens: Some(*prompt_tokens),
                output_tokens: Some(*completion_tokens),
                ..Answer::default()
            })
        }
    }
}
