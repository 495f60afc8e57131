//! Links under the path the client called. The `api` function runs with
//! `AWS_LAMBDA_HTTP_IGNORE_STAGE_IN_PATH=true`, so the router sees `/v1/runs` however the
//! client reached it: through the default execute-api URL (`https://…/v/v1/runs`, the stage in
//! the path), through a custom domain whose base path mapping puts the API under a prefix
//! (`https://api.example.com/trellis/v1/runs`), or through a custom domain mapped at its root
//! (`https://api.example.com/v1/runs`). API Gateway's REST proxy event keeps the called path in
//! `requestContext.path`. [`router_with_stage_links`] takes the part of it in front of the
//! path the router sees (`/v`, `/trellis`, or nothing) and hands the router that
//! [`trellis_http::BasePath`], so `statusUrl`, `eventsUrl`, `Location` and the interrupt
//! `callbackUrl` read as the client addresses them. When the router's path is not the tail of
//! the called path, or the request did not come from an API Gateway REST API, links get no
//! prefix.

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;
use axum::Router;
use lambda_http::request::RequestContext;
use trellis_http::BasePath;

/// `router` with its links kept under the path prefix the request came through (see the
/// module documentation). The `api` function and the local stack serve this.
pub fn router_with_stage_links(router: Router) -> Router {
    router.layer(axum::middleware::from_fn(stage_links))
}

/// The base path of a REST API proxy request whose router sees `routed` (the event's `path`):
/// the context's `path` (the path the client called) without `routed` at its end, when that
/// leaves a non-empty prefix of whole segments (`/v` for `/v/v1/runs` and `/v1/runs`).
pub fn stage_base_path(context: &RequestContext, routed: &str) -> Option<BasePath> {
    let RequestContext::ApiGatewayV1(context) = context else { return None };
    let called = context.path.as_deref()?;
    if !routed.starts_with('/') {
        return None;
    }
    let prefix = called.strip_suffix(routed)?;
    let whole_segments = prefix.starts_with('/') && !prefix.ends_with('/');
    whole_segments.then(|| BasePath::new(prefix))
}

async fn stage_links(mut request: Request, next: Next) -> Response {
    let routed = request.uri().path().to_owned();
    let base = request.extensions().get::<RequestContext>().and_then(|context| stage_base_path(context, &routed));
    if let Some(base) = base {
        request.extensions_mut().insert(base);
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::routing::get;
    use http_body_util::BodyExt;
    use lambda_http::aws_lambda_events::apigw::ApiGatewayProxyRequestContext;
    use tower::ServiceExt;

    fn context(stage: Option<&str>, path: Option<&str>) -> RequestContext {
        let mut context = ApiGatewayProxyRequestContext::default();
        context.stage = stage.map(str::to_owned);
        context.path = path.map(str::to_owned);
        RequestContext::ApiGatewayV1(context)
    }

    fn base(stage: Option<&str>, called: Option<&str>, routed: &str) -> Option<String> {
        stage_base_path(&context(stage, called), routed).map(|base| base.as_str().to_owned())
    }

    #[test]
    fn the_prefix_is_the_called_path_in_front_of_the_routed_one() {
        // The default execute-api URL: the stage in the called path.
        assert_eq!(base(Some("v"), Some("/v/v1/runs"), "/v1/runs"), Some("/v".to_owned()));
        // A custom domain with a base path mapping (api.example.com/trellis → stage v).
        assert_eq!(base(Some("v"), Some("/trellis/v1/runs"), "/v1/runs"), Some("/trellis".to_owned()));
        assert_eq!(base(Some("v"), Some("/a/b/v1/runs/r-1"), "/v1/runs/r-1"), Some("/a/b".to_owned()));
        // A custom domain mapped at its root: nothing in front.
        assert_eq!(base(Some("v"), Some("/v1/runs"), "/v1/runs"), None);
    }

    #[test]
    fn no_prefix_unless_the_routed_path_is_a_whole_segment_tail_of_the_called_one() {
        assert_eq!(base(Some("v"), Some("/v/v1/runs"), "/v1/other"), None);
        assert_eq!(base(Some("v"), Some("/vv1/runs"), "v1/runs"), None);
        assert_eq!(base(Some("v"), Some("/v//v1/runs"), "/v1/runs"), None);
        assert_eq!(base(Some("v"), None, "/v1/runs"), None);
        assert_eq!(base(None, Some("/v/v1/runs"), "/v1/runs"), Some("/v".to_owned()));
    }

    /// The base path the router's handler received for a request to `routed` from `called`.
    async fn seen_base(called: &str, routed: &str) -> String {
        let router = router_with_stage_links(
            Router::new().route("/v1/runs", get(|base: BasePath| async move { base.as_str().to_owned() })),
        );
        let mut request = axum::http::Request::get(routed).body(Body::empty()).unwrap();
        request.extensions_mut().insert(context(Some("v"), Some(called)));
        let response = router.oneshot(request).await.unwrap();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        String::from_utf8(body.to_vec()).unwrap()
    }

    #[tokio::test]
    async fn the_router_gets_the_base_path_of_the_stage_or_of_a_base_path_mapping() {
        assert_eq!(seen_base("/v/v1/runs", "/v1/runs").await, "/v");
        assert_eq!(seen_base("/trellis/v1/runs", "/v1/runs").await, "/trellis");
        assert_eq!(seen_base("/v1/runs", "/v1/runs").await, "");
    }
}
