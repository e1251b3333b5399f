//! Server-sent-event streaming in OpenAI's chunk format: a finished generation cut into one
//! delta per token (where the tokens decode to whole characters), written as `data: {chunk}`
//! events and a final `data: [DONE]`.

use std::ops::Range;

use axum::http::header;
use axum::response::{IntoResponse, Response};
use rstar_policy::Tokenizer;
use serde::Serialize;

/// One delta of a streamed choice: text and the generated tokens it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Piece {
    /// The text this delta adds.
    pub text: String,
    /// The generated tokens behind it (indices into the choice's tokens).
    pub tokens: Range<usize>,
}

/// Cuts `text`, what a choice reports (its generation less a cut stop string, or the content
/// before a tool call), into one piece per token wherever the tokens so far decode to a prefix of
/// it that ends on a whole character, so no delta splits a multi-byte character. The pieces'
/// texts concatenate to `text` and their token ranges cover `0..tokens.len()` in order: tokens
/// that add nothing to `text` (a cut stop string, a tool call) go with the last piece, whose text
/// may then be empty.
pub(super) fn pieces(tokenizer: &Tokenizer, tokens: &[u32], text: &str) -> Vec<Piece> {
    let mut out = Vec::new();
    // Bytes of `text` and tokens already handed out.
    let (mut done, mut from) = (0, 0);
    for i in 0..tokens.len() {
        if done == text.len() {
            break;
        }
        // Decoding from the last cut on keeps this linear in the tokens of one piece.
        let Ok(decoded) = tokenizer.decode(&tokens[from..=i]) else {
            continue;
        };
        if decoded.is_empty() || decoded.ends_with('\u{FFFD}') {
            continue;
        }
        if text[done..].starts_with(decoded.as_str()) {
            out.push(Piece {
                text: decoded.clone(),
                tokens: from..i + 1,
            });
            done += decoded.len();
            from = i + 1;
        }
    }
    if done < text.len() || from < tokens.len() {
        out.push(Piece {
            text: text[done..].to_string(),
            tokens: from..tokens.len(),
        });
    }
    out
}

/// The events of a stream: each chunk as `data: {json}`, then `data: [DONE]`.
pub(super) fn sse_body<T: Serialize>(chunks: &[T]) -> String {
    let mut body = String::new();
    for chunk in chunks {
        body.push_str("data: ");
        // Through a `Value`, as `json` in `lib.rs` writes answers (the wire types have string
        // keys only, so they always make one).
        let chunk = serde_json::to_value(chunk).unwrap_or_default();
        body.push_str(&chunk.to_string());
        body.push_str("\n\n");
    }
    body.push_str("data: [DONE]\n\n");
    body
}

/// A 200 `text/event-stream` response of `chunks`.
pub(super) fn sse_response<T: Serialize>(chunks: &[T]) -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        sse_body(chunks),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &str, generated: &str, expected: &[(&str, Range<usize>)]) {
        let tok = Tokenizer::char();
        let tokens = tok.encode(generated).unwrap();
        let got = pieces(&tok, &tokens, text);
        let expected: Vec<Piece> = expected
            .iter()
            .map(|(t, r)| Piece {
                text: t.to_string(),
                tokens: r.clone(),
            })
            .collect();
        assert_eq!(got, expected, "{text:?} from {generated:?}");
        assert_eq!(
            got.iter().map(|p| p.text.as_str()).collect::<String>(),
            text
        );
    }

    #[test]
    fn issue_44_one_piece_per_whole_character() {
        // One token a character.
        check("ab", "ab", &[("a", 0..1), ("b", 1..2)]);
        // `é` is two byte tokens: one piece, never half a character.
        check("é!", "é!", &[("é", 0..2), ("!", 2..3)]);
        // A cut stop string's tokens ride with an empty last piece.
        check(
            "hi",
            "hi<|im_end|>",
            &[("h", 0..1), ("i", 1..2), ("", 2..3)],
        );
        // Content before a tool call: the call's tokens go with the last piece.
        check(
            "ok\n",
            "ok\n<tool_call>{}</tool_call>",
            &[("o", 0..1), ("k", 1..2), ("\n", 2..3), ("", 3..7)],
        );
        // Nothing to say: one empty piece with every token.
        check("", "<tool_call>x", &[("", 0..2)]);
        check("", "", &[]);
        // Text the tokens do not spell (never the case in the server): whatever is left, whole.
        check("xyz", "ab", &[("xyz", 0..2)]);
    }

    #[test]
    fn issue_44_events_end_with_done() {
        let body = sse_body(&[serde_json::json!({"a": 1}), serde_json::json!({"b": [2]})]);
        assert_eq!(
            body,
            "data: {\"a\":1}\n\ndata: {\"b\":[2]}\n\ndata: [DONE]\n\n"
        );
        assert_eq!(sse_body::<serde_json::Value>(&[]), "data: [DONE]\n\n");
    }
}
