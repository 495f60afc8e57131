//! Links under the API Gateway stage. The `api` function runs with
//! `AWS_LAMBDA_HTTP_IGNORE_STAGE_IN_PATH=true`, so the router sees `/v1/runs` whether the
//! client called the default execute-api URL (`https://…/v/v1/runs`, the stage in the path)
//! or a custom domain (no stage in the path). [`router_with_stage_links`] reads the proxy
//! event's request context and, when its `path` starts with `/{stage}/`, hands the router a
//! [`trellis_http::BasePath`] of `/{stage}`, so `statusUrl`, `eventsUrl`, `Location` and the
//! interrupt `callbackUrl` read `/v/v1/…`, as the client addresses them. A custom domain's
//! path gets no prefix; neither does a request that did not come from API Gateway.

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;
use axum::Router;
use lambda_http::request::RequestContext;
use trellis_http::BasePath;

/// `router` with its links kept under the API Gateway stage the request came through (see
/// the module documentation). The `api` function and the local stack serve this.
pub fn router_with_stage_links(router: Router) -> Router {
    router.layer(axum::middleware::from_fn(stage_links))
}

/// The base path of a REST API proxy request: `/{stage}` when the context's path (the path
/// the client called) starts with `/{stage}/`.
pub fn stage_base_path(context: &RequestContext) -> Option<BasePath> {
    let RequestContext::ApiGatewayV1(context) = context else { return None };
    let stage = context.stage.as_deref().filter(|stage| !stage.is_empty() && *stage != "$default")?;
    let path = context.path.as_deref()?;
    let prefix = format!("/{stage}");
    path.strip_prefix(&prefix).filter(|rest| rest.starts_with('/')).map(|_| BasePath::new(prefix))
}

async fn stage_links(mut request: Request, next: Next) -> Response {
    let base = request.extensions().get::<RequestContext>().and_then(stage_base_path);
    if let Some(base) = base {
        request.extensions_mut().insert(base);
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use lambda_http::aws_lambda_events::apigw::ApiGatewayProxyRequestContext;

    fn context(stage: Option<&str>, path: Option<&str>) -> RequestContext {
        let mut context = ApiGatewayProxyRequestContext::default();
        context.stage = stage.map(str::to_owned);
        context.path = path.map(str::to_owned);
        RequestContext::ApiGatewayV1(context)
    }

    #[test]
    fn the_stage_prefixes_links_only_when_the_called_path_holds_it() {
        let base = |stage, path| stage_base_path(&context(stage, path)).map(|base| base.as_str().to_owned());
        assert_eq!(base(Some("v"), Some("/v/v1/runs")), Some("/v".to_owned()));
        // A custom domain (base path mapping): the called path has no stage.
        assert_eq!(base(Some("v"), Some("/v1/runs")), None);
        // The stage must be the whole first segment.
        assert_eq!(base(Some("v"), Some("/vv/v1/runs")), None);
        assert_eq!(base(Some("v"), Some("/v")), None);
        assert_eq!(base(None, Some("/v/v1/runs")), None);
        assert_eq!(base(Some("$default"), Some("/$default/v1/runs")), None);
        assert_eq!(base(Some("v"), None), None);
    }
}
