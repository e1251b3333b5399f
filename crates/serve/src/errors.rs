//! The OpenAI-style error answers, the API-key check and the fallbacks.

use super::*;

/// An OpenAI-style error response.
#[derive(Debug)]
pub(crate) struct ApiError {
    pub(crate) status: StatusCode,
    pub(crate) kind: &'static str,
    pub(crate) message: String,
    pub(crate) param: Option<String>,
}

impl ApiError {
    pub(crate) fn invalid(param: Option<&str>, message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            kind: "invalid_request_error",
            message: message.into(),
            param: param.map(str::to_string),
        }
    }

    pub(crate) fn field(param: &str, message: impl std::fmt::Display) -> Self {
        ApiError::invalid(Some(param), format!("`{param}`: {message}"))
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorResponse {
            error: Some(ErrorObject {
                message: self.message,
                kind: self.kind.to_string(),
                param: self.param,
                code: self.status.as_u16(),
            }),
            ..ErrorResponse::default()
        };
        (self.status, json(body)).into_response()
    }
}

/// Refuses a request without `Authorization: Bearer <key>` ([`ServeConfig::api_key`]).
pub(crate) async fn require_api_key(
    axum::extract::State(key): axum::extract::State<Arc<String>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    if rstar_http::bearer_matches(request.headers(), &key) {
        return next.run(request).await;
    }
    ApiError {
        status: StatusCode::UNAUTHORIZED,
        kind: "authentication_error",
        message: "missing or wrong API key: send `Authorization: Bearer <key>`".into(),
        param: None,
    }
    .into_response()
}

pub(crate) async fn not_found() -> ApiError {
    ApiError {
        status: StatusCode::NOT_FOUND,
        kind: "not_found_error",
        message: "no such route; the API serves POST /v1/completions, POST /v1/chat/completions, GET /v1/models and GET /health".into(),
        param: None,
    }
}

pub(crate) async fn method_not_allowed() -> ApiError {
    ApiError {
        status: StatusCode::METHOD_NOT_ALLOWED,
        kind: "invalid_request_error",
        message: "method not allowed on this route".into(),
        param: None,
    }
}
