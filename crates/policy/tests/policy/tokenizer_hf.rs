//! The HF tokenizer path reproduces the real Qwen3 tokenizer's reference ids.

use super::*;

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
