//! SFT: the corpus carries real tool outputs, the loss covers assistant tokens only, and
//! training lowers it.

use burn::tensor::Device;
use rstar_episode::episode::Limits;
use rstar_policy::{Qwen, Tokenizer};
use rstar_train::sft::{self, SftStep};

use super::common::{rows, sft_options, tasks, tiny_config, tools};

#[test]
fn demonstrations_carry_real_tool_outputs() {
    let ts = tasks(6, 4);
    let demos = sft::build_demonstrations(&ts, &Limits::compact(), 0.5, 3, &tools()).unwrap();
    assert_eq!(demos.len(), 6);
    assert_eq!(demos.iter().filter(|d| d.bug.is_some()).count(), 3);
    for (d, t) in demos.iter().zip(&ts) {
        assert_eq!(d.answer, t.answer());
        let text = d.response_text();
        // The tool turn before the answer shows what Python printed: the answer itself.
        assert!(text.contains(&format!("O:{}\n", t.answer())), "{text}");
        if d.bug.is_some() {
            assert!(
                text.contains("Error"),
                "a failing call shows Python's error: {text}"
            );
        }
    }
}

#[test]
fn loss_weights_cover_assistant_tokens_only() {
    let ts = tasks(2, 5);
    let rows = rows(&ts);
    let tok = Tokenizer::char();
    for r in &rows {
        assert_eq!(r.ids.len(), r.weights.len());
        // Decode the weighted tokens: they are the assistant turns, never `Q:`/`O:` lines.
        let trained: Vec<u32> = r
            .ids
            .iter()
            .zip(&r.weights)
            .filter(|(_, w)| **w > 0.0)
            .map(|(i, _)| *i)
            .collect();
        let text = tok.decode(&trained).unwrap();
        assert!(!text.contains("Q:") && !text.contains("O:"), "{text}");
        assert!(text.contains("</answer>"), "{text}");
    }
}

#[test]
fn training_lowers_the_loss() {
    let ts = tasks(4, 6);
    let rows = rows(&ts);
    let model = Qwen::random(tiny_config(), 2, &Device::flex().autodiff()).unwrap();
    let mut log: Vec<SftStep> = Vec::new();
    sft::train(model, &rows, &sft_options(40), 7, |s| log.push(*s)).unwrap();
    assert_eq!(log.len(), 40);
    let first = log[..5].iter().map(|s| s.loss).sum::<f32>() / 5.0;
    let last = log[35..].iter().map(|s| s.loss).sum::<f32>() / 5.0;
    // A random 274-way guess costs ln 274 ≈ 5.6 nats; memorising four demonstrations halves it.
    assert!(first > 4.5, "{first}");
    assert!(last < first / 2.0, "first {first}, last {last}");
    assert!(log.iter().all(|s| s.grad_norm.is_finite() && s.tokens > 0));
    // Warm-up: 2 steps to the peak, then constant.
    assert!((log[0].lr - 5e-3).abs() < 1e-12 && (log[10].lr - 1e-2).abs() < 1e-12);
}

#[test]
fn an_empty_corpus_is_an_error() {
    let model = Qwen::random(tiny_config(), 2, &Device::flex().autodiff()).unwrap();
    let err = sft::train(model, &[], &sft_options(1), 0, |_| {}).unwrap_err();
    assert!(err.to_string().contains("sft.corpus_size"), "{err}");
}

#[test]
fn a_batch_split_over_threads_and_micro_batches_takes_the_same_steps() {
    // The same three steps on one thread with one padded batch, and (threads, micro-batches)
    // (3, 1): shards of 3, 3 and 2 of a batch of 8; (1, 4): four length-sorted micro-batches
    // on one graph; (2, 3): three dealt out to two threads. The gradients of the parts add up
    // to the batch's, up to the order of the sums.
    let ts = tasks(6, 9);
    let rows = rows(&ts);
    let run = |threads: usize, micro_batches: usize| {
        let model = Qwen::random(tiny_config(), 4, &Device::flex().autodiff()).unwrap();
        let mut options = sft_options(3);
        options.batch_size = 8;
        options.threads = threads;
        options.micro_batches = micro_batches;
        let mut log: Vec<SftStep> = Vec::new();
        let model = sft::train(model, &rows, &options, 5, |s| log.push(*s)).unwrap();
        let params: Vec<f32> = model
            .hf_tensors()
            .unwrap()
            .into_iter()
            .flat_map(|(_, values)| values)
            .collect();
        (log, params)
    };
    let (one, p1) = run(1, 1);
    // The rows differ in length, so micro-batches pad less than the whole batch does.
    let lengths: Vec<usize> = rows.iter().map(|r| r.ids.len()).collect();
    assert!(lengths.iter().min() < lengths.iter().max(), "{lengths:?}");
    for (threads, micro) in [(3, 1), (1, 4), (2, 3)] {
        let (other, p) = run(threads, micro);
        for (a, b) in one.iter().zip(&other) {
            assert_eq!(a.tokens, b.tokens);
            assert!(
                (a.loss - b.loss).abs() < 1e-5 * a.loss,
                "{threads}/{micro}: {a:?} {b:?}"
            );
            assert!(
                (a.grad_norm - b.grad_norm).abs() < 1e-4 * a.grad_norm,
                "{threads}/{micro}: {a:?} {b:?}"
            );
        }
        let max_diff = p1
            .iter()
            .zip(&p)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0f32, f32::max);
        assert!(
            max_diff < 1e-4,
            "{threads}/{micro}: parameters differ by {max_diff}"
        );
        // And the steps moved the parameters: the comparison is not of two untrained models.
        assert!(one[0].grad_norm > 1e-3, "{:?}", one[0]);
    }
}

#[test]
fn a_bf16_sft_takes_the_f32_steps_within_bf16_precision_and_hands_back_an_f32_model() {
    // bf16 compute over f32 master weights (`sft.precision`): the same three steps' losses
    // within 2% and gradient norms within 10% of f32's; the parameters stay f32, and the
    // model comes back computing in the precision it came in.
    let ts = tasks(6, 9);
    let rows = rows(&ts);
    let run = |precision: rstar_policy::Precision| {
        let model = Qwen::random(tiny_config(), 4, &Device::flex().autodiff()).unwrap();
        let mut options = sft_options(3);
        options.batch_size = 8;
        options.precision = precision;
        let mut log: Vec<SftStep> = Vec::new();
        let model = sft::train(model, &rows, &options, 5, |s| log.push(*s)).unwrap();
        assert_eq!(model.precision, rstar_policy::Precision::F32);
        assert_eq!(model.embed_tokens.val().dtype(), burn::tensor::DType::F32);
        log
    };
    let f32_steps = run(rstar_policy::Precision::F32);
    let bf16_steps = run(rstar_policy::Precision::Bf16);
    for (a, b) in f32_steps.iter().zip(&bf16_steps) {
        assert!((a.loss - b.loss).abs() < 0.02 * a.loss, "{a:?} {b:?}");
        assert!(
            (a.grad_norm - b.grad_norm).abs() < 0.1 * a.grad_norm,
            "{a:?} {b:?}"
        );
    }
    // bf16 is not f32 under another name: the losses differ somewhere.
    assert!(
        f32_steps
            .iter()
            .zip(&bf16_steps)
            .any(|(a, b)| a.loss != b.loss),
        "{f32_steps:?} {bf16_steps:?}"
    );
}
