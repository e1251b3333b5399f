//! The HF tokenizer path reproduces the real Qwen3 tokenizer's reference ids.

use super::common::*;
use std::sync::OnceLock;

use rstar_policy::Tokenizer;
use serde_json::Value;

#[test]
fn qwen3_tokenizer_matches_reference_ids() {
    let path = rstar_testdata::fixture("qwen/tokenizer_reference.json");
    let reference: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let tok = qwen_tokenizer();
    let cases = reference["cases"].as_array().unwrap();
    assert!(cases.len() >= 18);
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let text = case["text"].as_str().unwrap();
        let ids = tok.encode(text).unwrap();
        assert_eq!(ids, u32s(&case["ids"]), "case {name}");
        assert_eq!(
            tok.decode(&ids).unwrap(),
            case["decoded"].as_str().unwrap(),
            "case {name}"
        );
    }
    let chat = &reference["chat_template"];
    let ids = tok.encode(chat["rendered"].as_str().unwrap()).unwrap();
    assert_eq!(ids, u32s(&chat["ids"]));
    for (special, id) in [
        ("<|im_start|>", 151644),
        ("<|im_end|>", 151645),
        ("<tool_call>", 151657),
        ("</tool_response>", 151666),
    ] {
        assert_eq!(tok.token_to_id(special), Some(id), "{special}");
        assert_eq!(
            tok.encode(special).unwrap(),
            vec![id],
            "{special} is kept whole"
        );
    }
    assert_eq!(tok.vocab_size(), 151_669);
}

/// The built-in tokenizer written as an HF `tokenizer.json`, read back by the `tokenizers`
/// library (what transformers and vLLM run).
fn char_as_hf() -> Tokenizer {
    let dir = tempfile::tempdir().unwrap();
    Tokenizer::char().save_to_dir(dir.path()).unwrap();
    // The directory still loads as the built-in tokenizer here.
    assert!(matches!(
        Tokenizer::from_dir(dir.path()).unwrap(),
        Tokenizer::Char(_)
    ));
    let config: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("tokenizer_config.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(config["tokenizer_class"], "PreTrainedTokenizerFast");
    Tokenizer::from_hf_file(&dir.path().join("tokenizer.json")).unwrap()
}

#[test]
fn the_char_tokenizer_as_hf_gives_the_same_ids_and_text() {
    let hf = char_as_hf();
    let ours = Tokenizer::char();
    assert_eq!(hf.vocab_size(), ours.vocab_size());
    for text in [
        "Q:12*34?\nA:<c>print(12*34)</c>",
        "<|im_start|>user\n<tool_call>{\"name\": \"x\"}</tool_call><|im_end|>",
        "<tools></tools><tool_response>\\boxed{408}</tool_response>",
        "<tool<c></c</c>>",
        "naïve ∑ 🦀 tabs\tand spaces  ",
        "",
    ] {
        let ids = ours.encode(text).unwrap();
        assert_eq!(hf.encode(text).unwrap(), ids, "{text:?}");
        assert_eq!(hf.decode(&ids).unwrap(), text, "{text:?}");
    }
    // Ids written out by hand: `<c>` is special 16, `7` is byte 55 at offset 18.
    assert_eq!(hf.encode("<c>7").unwrap(), vec![16, 18 + 55]);
}

proptest::proptest! {
    #[test]
    fn the_char_tokenizer_as_hf_agrees_on_any_text(
        text in "(<c>|</c>|<tool_call>|</tool_call>|<\\|im_end\\|>|<tool|\\\\boxed\\{|[ -~\n\t]|[é∑🦀])*"
    ) {
        static HF: OnceLock<Tokenizer> = OnceLock::new();
        let hf = HF.get_or_init(char_as_hf);
        let ids = Tokenizer::char().encode(&text).unwrap();
        proptest::prop_assert_eq!(hf.encode(&text).unwrap(), ids.clone());
        proptest::prop_assert_eq!(hf.decode(&ids).unwrap(), text);
    }
}
