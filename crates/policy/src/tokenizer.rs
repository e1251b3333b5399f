//! Tokenizers: HF `tokenizer.json` and the built-in byte/character tokenizer.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// File name of the built-in tokenizer inside a checkpoint directory.
pub const CHAR_TOKENIZER_FILE: &str = "tokenizer_rstar.json";
/// File name of an HF tokenizer inside a model directory.
pub const HF_TOKENIZER_FILE: &str = "tokenizer.json";

/// The special strings of the built-in tokenizer, each a single token: the
/// ChatML and rStar2-Agent template tags, and `<c>`/`</c>`, the code delimiters
/// of `rstar-agent`'s compact template.
///
/// Ids are their positions here; bytes follow at [`CharTokenizer::BYTE_OFFSET`].
pub const CHAR_SPECIALS: &[&str] = &[
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<answer>",
    "</answer>",
    "<reason>",
    "</reason>",
    "<think>",
    "</think>",
    "<tools>",
    "</tools>",
    "\\boxed{",
    "<c>",
    "</c>",
];

/// A tokenizer for the embedded default: the prompt-template tags of
/// [`CHAR_SPECIALS`] as single tokens, then one token per byte.
///
/// Every ASCII character (digits, letters, the punctuation of Python and
/// LaTeX, newlines, tabs) is one token, and any other UTF-8 text falls back to
/// its bytes, so `decode(encode(s)) == s` for every string.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CharTokenizer {
    specials: Vec<String>,
}

impl Default for CharTokenizer {
    fn default() -> Self {
        Self::new()
    }
}

impl CharTokenizer {
    /// Id of `<|endoftext|>`.
    pub const ENDOFTEXT: u32 = 0;
    /// Id of `<|im_start|>`.
    pub const IM_START: u32 = 1;
    /// Id of `<|im_end|>`.
    pub const IM_END: u32 = 2;
    /// Id of the first byte token (byte `b` has id `BYTE_OFFSET + b`).
    pub const BYTE_OFFSET: u32 = CHAR_SPECIALS.len() as u32;

    /// The built-in vocabulary.
    pub fn new() -> Self {
        CharTokenizer {
            specials: CHAR_SPECIALS.iter().map(|s| s.to_string()).collect(),
        }
    }

    /// Number of ids: the specials plus 256 bytes.
    pub fn vocab_size(&self) -> usize {
        self.specials.len() + 256
    }

    /// This vocabulary as the text of an HF `tokenizer.json`, so that HF tools (transformers,
    /// vLLM, SGLang) read a model directory written with it: the specials as added tokens with
    /// their ids (matched leftmost-longest, as [`encode`](Self::encode) matches them; none
    /// marked special, so that decoding never drops them), then a byte-level BPE without
    /// merges, byte `b` as id `BYTE_OFFSET + b`. Both tokenizers give the same ids and text
    /// for any string.
    pub fn to_hf_json(&self) -> String {
        let offset = self.byte_offset();
        // The specials are in the model's vocabulary too: the `tokenizers` library numbers
        // added tokens that the model does not know after its vocabulary, whatever ids the
        // file gives them.
        let vocab: serde_json::Map<String, serde_json::Value> = self
            .specials
            .iter()
            .enumerate()
            .map(|(id, s)| (s.clone(), serde_json::json!(id)))
            .chain(
                byte_level_chars()
                    .into_iter()
                    .enumerate()
                    .map(|(b, c)| (c.to_string(), serde_json::json!(offset as usize + b))),
            )
            .collect();
        let added: Vec<serde_json::Value> = self
            .specials
            .iter()
            .enumerate()
            .map(|(id, content)| {
                serde_json::json!({
                    "id": id, "content": content, "single_word": false, "lstrip": false,
                    "rstrip": false, "normalized": false, "special": false
                })
            })
            .collect();
        let byte_level = serde_json::json!({
            "type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false,
            "use_regex": false
        });
        let hf = serde_json::json!({
            "version": "1.0",
            "truncation": null,
            "padding": null,
            "added_tokens": added,
            "normalizer": null,
            "pre_tokenizer": byte_level,
            "post_processor": null,
            "decoder": byte_level,
            "model": {
                "type": "BPE", "dropout": null, "unk_token": null,
                "continuing_subword_prefix": null, "end_of_word_suffix": null,
                "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
                "vocab": vocab, "merges": []
            }
        });
        serde_json::to_string_pretty(&hf).expect("the tokenizer serialises")
    }

    fn byte_offset(&self) -> u32 {
        self.specials.len() as u32
    }

    /// Encodes text, matching the longest special string first.
    pub fn encode(&self, text: &str) -> Vec<u32> {
        self.encode_with_offsets(text).0
    }

    /// [`CharTokenizer::encode`] with each token's byte range in `text`.
    pub fn encode_with_offsets(&self, text: &str) -> (Vec<u32>, Vec<Span>) {
        let bytes = text.as_bytes();
        let mut ids = Vec::with_capacity(bytes.len());
        let mut offsets = Vec::with_capacity(bytes.len());
        let mut i = 0;
        while i < bytes.len() {
            let rest = &bytes[i..];
            let special = self
                .specials
                .iter()
                .enumerate()
                .filter(|(_, s)| rest.starts_with(s.as_bytes()))
                .max_by_key(|(_, s)| s.len());
            let len = match special {
                Some((id, s)) => {
                    ids.push(id as u32);
                    s.len()
                }
                None => {
                    ids.push(self.byte_offset() + u32::from(bytes[i]));
                    1
                }
            };
            offsets.push((i, i + len));
            i += len;
        }
        (ids, offsets)
    }

    /// Decodes ids; invalid UTF-8 (a cut multi-byte character) becomes U+FFFD.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        let mut bytes = Vec::with_capacity(ids.len());
        for &id in ids {
            if (id as usize) < self.specials.len() {
                bytes.extend_from_slice(self.specials[id as usize].as_bytes());
            } else if (id as usize) < self.vocab_size() {
                bytes.push((id - self.byte_offset()) as u8);
            } else {
                return Err(Error::TokenOutOfRange {
                    id,
                    vocab_size: self.vocab_size(),
                });
            }
        }
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// The id of a special string or a single-byte string.
    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        if let Some(i) = self.specials.iter().position(|s| s == token) {
            return Some(i as u32);
        }
        match token.as_bytes() {
            [b] => Some(self.byte_offset() + u32::from(*b)),
            _ => None,
        }
    }
}

/// A token's byte range in the text it was encoded from: `(start, end)`.
pub type Span = (usize, usize);

/// A tokenizer: HF `tokenizer.json` or the built-in [`CharTokenizer`].
#[derive(Debug, Clone)]
pub enum Tokenizer {
    /// An HF tokenizer (byte-level BPE for Qwen). Added tokens such as
    /// `<|im_start|>` are matched whole.
    Hf(Box<tokenizers::Tokenizer>),
    /// The built-in tokenizer of the embedded default.
    Char(CharTokenizer),
}

/// GPT-2's byte-level alphabet: the character standing for each byte, in byte order (printable
/// Latin-1 bytes stand for themselves, the others for U+0100 on).
fn byte_level_chars() -> Vec<char> {
    let printable = |b: u32| (33..=126).contains(&b) || (161..=172).contains(&b) || b >= 174;
    let mut next = 256u32;
    (0u32..256)
        .map(|b| {
            let code = if printable(b) {
                b
            } else {
                next += 1;
                next - 1
            };
            char::from_u32(code).expect("a code point below U+0144")
        })
        .collect()
}

impl Tokenizer {
    /// The built-in tokenizer.
    pub fn char() -> Self {
        Tokenizer::Char(CharTokenizer::new())
    }

    /// Loads an HF `tokenizer.json`.
    pub fn from_hf_file(path: &Path) -> Result<Self> {
        let tok = tokenizers::Tokenizer::from_file(path)
            .map_err(|e| Error::Tokenizer(format!("{}: {e}", path.display())))?;
        Ok(Tokenizer::Hf(Box::new(tok)))
    }

    /// Loads the tokenizer of a model directory: `tokenizer_rstar.json`
    /// (built-in) if present, else `tokenizer.json` (HF).
    pub fn from_dir(dir: &Path) -> Result<Self> {
        let char_path = dir.join(CHAR_TOKENIZER_FILE);
        if char_path.is_file() {
            let text = std::fs::read_to_string(&char_path).map_err(|e| Error::io(&char_path, e))?;
            let tok: CharTokenizer =
                serde_json::from_str(&text).map_err(|e| Error::json(&char_path, &e))?;
            return Ok(Tokenizer::Char(tok));
        }
        let hf_path = dir.join(HF_TOKENIZER_FILE);
        if hf_path.is_file() {
            return Self::from_hf_file(&hf_path);
        }
        Err(Error::NoTokenizer {
            path: dir.to_path_buf(),
        })
    }

    /// Writes the tokenizer into a directory; returns the file this crate reads back. The
    /// built-in one is also written as an HF `tokenizer.json` with a `tokenizer_config.json`
    /// ([`CharTokenizer::to_hf_json`]), for HF tools; [`from_dir`](Self::from_dir) reads
    /// `tokenizer_rstar.json` first, so the directory still loads as the built-in tokenizer
    /// here.
    pub fn save_to_dir(&self, dir: &Path) -> Result<PathBuf> {
        match self {
            Tokenizer::Char(tok) => {
                let hf = dir.join(HF_TOKENIZER_FILE);
                std::fs::write(&hf, tok.to_hf_json()).map_err(|e| Error::io(&hf, e))?;
                let config = dir.join("tokenizer_config.json");
                let text = serde_json::to_string_pretty(&serde_json::json!({
                    "tokenizer_class": "PreTrainedTokenizerFast",
                    "eos_token": "<|im_end|>",
                    "pad_token": "<|endoftext|>",
                    "clean_up_tokenization_spaces": false,
                    "model_max_length": 1_000_000,
                }))
                .expect("the config serialises");
                std::fs::write(&config, text).map_err(|e| Error::io(&config, e))?;
                let path = dir.join(CHAR_TOKENIZER_FILE);
                let text = serde_json::to_string_pretty(tok).expect("tokenizer serialises");
                std::fs::write(&path, text).map_err(|e| Error::io(&path, e))?;
                Ok(path)
            }
            Tokenizer::Hf(tok) => {
                let path = dir.join(HF_TOKENIZER_FILE);
                tok.save(&path, false)
                    .map_err(|e| Error::Tokenizer(format!("{}: {e}", path.display())))?;
                Ok(path)
            }
        }
    }

    /// Encodes text without adding BOS/EOS (Qwen adds none either way).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        match self {
            Tokenizer::Char(tok) => Ok(tok.encode(text)),
            Tokenizer::Hf(tok) => tok
                .encode(text, false)
                .map(|e| e.get_ids().to_vec())
                .map_err(|e| Error::Tokenizer(e.to_string())),
        }
    }

    /// Encodes text as [`Tokenizer::encode`] does, with each token's byte range in `text`
    /// (for loss masks over spans of a rendered conversation).
    ///
    /// # Errors
    /// The HF tokenizer's errors.
    pub fn encode_with_offsets(&self, text: &str) -> Result<(Vec<u32>, Vec<Span>)> {
        match self {
            Tokenizer::Char(tok) => Ok(tok.encode_with_offsets(text)),
            Tokenizer::Hf(tok) => tok
                .encode(text, false)
                .map(|e| (e.get_ids().to_vec(), e.get_offsets().to_vec()))
                .map_err(|e| Error::Tokenizer(e.to_string())),
        }
    }

    /// Decodes ids, keeping special tokens as text.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        match self {
            Tokenizer::Char(tok) => tok.decode(ids),
            Tokenizer::Hf(tok) => tok
                .decode(ids, false)
                .map_err(|e| Error::Tokenizer(e.to_string())),
        }
    }

    /// Vocabulary size including added tokens.
    pub fn vocab_size(&self) -> usize {
        match self {
            Tokenizer::Char(tok) => tok.vocab_size(),
            Tokenizer::Hf(tok) => tok.get_vocab_size(true),
        }
    }

    /// The id of a token string (a special such as `<|im_end|>`).
    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        match self {
            Tokenizer::Char(tok) => tok.token_to_id(token),
            Tokenizer::Hf(tok) => tok.token_to_id(token),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn template_tags_are_single_tokens() {
        let tok = CharTokenizer::new();
        for s in CHAR_SPECIALS {
            assert_eq!(tok.encode(s).len(), 1, "{s}");
        }
        let ids = tok.encode("<|im_start|>user\n1+1<|im_end|>");
        assert_eq!(ids[0], CharTokenizer::IM_START);
        assert_eq!(*ids.last().unwrap(), CharTokenizer::IM_END);
        assert_eq!(ids.len(), 2 + "user\n1+1".len());
        // Digits, letters and LaTeX punctuation map to their bytes.
        let b = CharTokenizer::BYTE_OFFSET;
        assert_eq!(tok.encode("7a{"), vec![b + 55, b + 97, b + 123]);
        assert_eq!(tok.encode("\\boxed{42}"), vec![15, b + 52, b + 50, b + 125]);
    }

    #[test]
    fn decode_rejects_out_of_range_ids() {
        let tok = CharTokenizer::new();
        assert!(tok.decode(&[tok.vocab_size() as u32]).is_err());
    }

    proptest! {
        #[test]
        fn round_trip(s in ".*") {
            let tok = CharTokenizer::new();
            prop_assert_eq!(tok.decode(&tok.encode(&s)).unwrap(), s);
        }

        #[test]
        fn round_trip_template_like(s in "(<tool_call>|</answer>|\\\\boxed\\{|[ -~\n])*") {
            let tok = CharTokenizer::new();
            prop_assert_eq!(tok.decode(&tok.encode(&s)).unwrap(), s);
        }
    }
}
