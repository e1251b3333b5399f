//! The load an engine reports for the kv-aware dispatcher: Prometheus gauges read as vLLM and
//! SGLang write them (values worked out by hand), `rstar serve`'s `GET /metrics`, a local
//! engine's own counters, and a [`RemoteEngine`]'s free tokens read from a server.

use std::sync::Arc;

use rstar_engine::remote::{RemoteEngine, RemoteEngineConfig};
use rstar_engine::{
    EngineLoad, LocalEngine, LocalEngineConfig, TurnGenerator, TurnOptions, TurnSpec,
};

use super::common::{http, load, runtime, serve};

#[test]
fn vllm_and_sglang_gauges_read_as_tokens() {
    let vllm = r#"
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_waiting{engine="0",model_name="m"} 1.0
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
vllm:cache_config_info{block_size="16",cache_dtype="auto",model_name="a b, c",num_gpu_blocks="1000"} 1.0
vllm:prompt_tokens_total{model_name="m"} 1234.0 1700000000000
"#;
    let load = EngineLoad::from_prometheus(vllm);
    // 1000 blocks of 16 tokens, a quarter in use.
    assert_eq!(load.capacity_tokens, Some(16_000));
    assert_eq!(load.used_tokens, Some(4_000));
    assert_eq!(load.free_tokens(), Some(12_000));
    assert_eq!((load.running, load.waiting), (Some(3), Some(1)));

    // SGLang, two data-parallel ranks: counts and capacities add up, usage is averaged.
    let sglang = "sglang:max_total_num_tokens{model_name=\"m\",dp=\"0\"} 161721.0\n\
                  sglang:max_total_num_tokens{model_name=\"m\",dp=\"1\"} 161721.0\n\
                  sglang:token_usage{model_name=\"m\",dp=\"0\"} 0.2\n\
                  sglang:token_usage{model_name=\"m\",dp=\"1\"} 0.36\n\
                  sglang:num_running_reqs{model_name=\"m\",dp=\"0\"} 5.0\n\
                  sglang:num_running_reqs{model_name=\"m\",dp=\"1\"} 4.0\n\
                  sglang:num_queue_reqs{model_name=\"m\",dp=\"0\"} 2\n";
    let load = EngineLoad::from_prometheus(sglang);
    assert_eq!(load.capacity_tokens, Some(323_442));
    // 323442 × 0.28 = 90563.76.
    assert_eq!(load.used_tokens, Some(90_564));
    assert_eq!((load.running, load.waiting), (Some(9), Some(2)));

    // What is not reported stays unknown, and the free tokens with it.
    let partial = EngineLoad::from_prometheus("vllm:kv_cache_usage_perc 0.5\nnot a metric\n");
    assert_eq!(partial, EngineLoad::default());
    assert_eq!(partial.free_tokens(), None);
    assert_eq!(
        EngineLoad::from_prometheus("vllm:num_requests_running NaN\nvllm:num_requests_waiting x\n"),
        EngineLoad::default()
    );

    // What `rstar serve` writes reads back the same.
    let ours = EngineLoad {
        capacity_tokens: Some(4096),
        used_tokens: Some(1024),
        running: Some(2),
        waiting: Some(5),
    };
    let text = ours.to_prometheus("a \"quoted\" model");
    assert!(
        text.contains("# TYPE vllm:kv_cache_usage_perc gauge"),
        "{text}"
    );
    assert_eq!(EngineLoad::from_prometheus(&text), ours);
}

#[test]
fn a_local_engine_counts_the_turns_in_flight() {
    let (model, tokenizer) = load();
    let context = tokenizer.encode("What is 2*3?").unwrap();
    let mut config = LocalEngineConfig::new(Vec::new());
    config.kv_capacity = 10_000;
    let engine = LocalEngine::spawn(model, tokenizer, config);
    let idle = engine.load();
    assert_eq!(idle.capacity_tokens, Some(10_000));
    assert_eq!(
        (idle.used_tokens, idle.running, idle.waiting),
        (Some(0), Some(0), Some(0))
    );
    let spec = |seed| TurnSpec {
        rollout: seed,
        turn: 0,
        context: context.clone(),
        max_new_tokens: 8,
        seed,
    };
    // Two turns sent: each reserves its context plus its budget until it is answered.
    let a = engine.generate_versioned(spec(1), TurnOptions::default());
    let b = engine.generate_versioned(spec(2), TurnOptions::default());
    let busy = engine.load();
    let each = (context.len() + 8) as u64;
    assert_eq!(busy.used_tokens, Some(2 * each));
    assert_eq!(busy.running.unwrap() + busy.waiting.unwrap(), 2);
    let rt = runtime();
    assert_eq!(
        rt.block_on(engine.free_kv_tokens()).unwrap(),
        10_000 - 2 * each
    );
    rt.block_on(async { (a.await.unwrap(), b.await.unwrap()) });
    assert_eq!(engine.load().used_tokens, Some(0));
    // A turn whose caller went away is taken off too.
    drop(engine.generate_versioned(spec(3), TurnOptions::default()));
    assert_eq!(engine.load().used_tokens, Some(0));
}

#[test]
fn serve_reports_its_load_and_a_remote_engine_reads_it() {
    let rt = runtime();
    let server = serve(&rt, 2, 3);
    let addr = server.addr().to_string();
    let (status, text) = http(&addr, "GET", "/metrics", "");
    assert_eq!(status, 200, "{text}");
    let (model, tokenizer) = load();
    // Two engines, each holding a batch of three full-length sequences.
    let capacity = (2 * 3 * model.config.max_position_embeddings) as u64;
    let reported = EngineLoad::from_prometheus(&text);
    assert_eq!(
        reported,
        EngineLoad {
            capacity_tokens: Some(capacity),
            used_tokens: Some(0),
            running: Some(0),
            waiting: Some(0),
        },
        "{text}"
    );
    let remote = RemoteEngine::new(
        RemoteEngineConfig::new(format!("http://{addr}"), Vec::new()),
        Arc::new(tokenizer),
    )
    .unwrap();
    // Before asking, the configured capacity; after, the reported one.
    assert_eq!(
        remote.kv_capacity(),
        RemoteEngineConfig::new("x", Vec::new()).kv_capacity
    );
    assert_eq!(rt.block_on(remote.free_kv_tokens()).unwrap(), capacity);
    assert_eq!(remote.kv_capacity(), capacity);
    assert_eq!(rt.block_on(remote.load()).unwrap(), reported);
    rt.block_on(server.shutdown()).unwrap();
    // A server that is gone is unavailable, which the dispatcher treats as a lost engine.
    let err = rt.block_on(remote.free_kv_tokens()).unwrap_err();
    assert!(
        rstar_scheduler::EngineUnavailable::is_in(err.as_ref()),
        "{err}"
    );
}
