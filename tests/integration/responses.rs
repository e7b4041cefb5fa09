//! Responses API objects follow their provider: through two sidecars with the same config, in
//! front of two fake providers that keep their own responses, follow-ups, retrieval,
//! cancellation, deletion, input items and background mode reach the candidate that issued the
//! response; ids sturnus did not issue get a 404 and reach no provider.

use crate::common::{client, two_candidates_config, FakeProvider, Fault, Proxy};
use serde_json::{json, Value};
use sturnus::body::holder_tag::{untag, HolderTag, SUFFIX_LEN};

/// Two providers `a` and `b` (alias `fast`: `a/ma`, `b/mb`) and two sidecars with one config.
async fn two_sidecars() -> (FakeProvider, FakeProvider, Proxy, Proxy) {
    let (a, b, config) = two_candidates_config("").await;
    let one = Proxy::start(&config).await;
    let two = Proxy::start(&config).await;
    (a, b, one, two)
}

/// POSTs a Responses API body through `proxy`.
async fn create(proxy: &Proxy, body: &Value) -> reqwest::Response {
    client()
        .post(proxy.url("/v1/responses"))
        .json(body)
        .send()
        .await
        .unwrap()
}

/// Sends `method path` to `proxy` with no body.
async fn call(proxy: &Proxy, method: reqwest::Method, path: &str) -> reqwest::Response {
    client()
        .request(method, proxy.url(path))
        .send()
        .await
        .unwrap()
}

/// The JSON answer of `method path` through `proxy`.
async fn call_json(proxy: &Proxy, method: reqwest::Method, path: &str) -> Value {
    call(proxy, method, path).await.json().await.unwrap()
}

/// The `data:` payloads of an SSE body.
fn events(text: &str) -> Vec<Value> {
    text.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

/// The provider's own id in a tagged id, checking the tag names `holder`'s candidate.
fn provider_id<'a>(id: &'a str, holder: &str) -> &'a str {
    let untagged = untag(id).unwrap_or_else(|| panic!("{id} carries no valid tag"));
    let model = if holder == "a" { "ma" } else { "mb" };
    assert_eq!(untagged.holder, HolderTag::of(holder, model), "{id}");
    assert_eq!(id.len(), untagged.provider_id.len() + SUFFIX_LEN);
    untagged.provider_id
}

/// The provider that answered.
fn served_by(resp: &reqwest::Response) -> String {
    crate::common::served_by(resp)
}

#[tokio::test]
async fn multi_turn_conversations_through_two_sidecars_never_break() {
    let (a, b, one, two) = two_sidecars().await;
    a.set_recording(true);
    b.set_recording(true);
    let mut holders = Vec::new();
    for conversation in 0..12 {
        let stream = conversation % 2 == 1;
        let mut previous: Option<String> = None;
        let mut holder = None;
        for turn in 1..=3u32 {
            let proxy = if turn % 2 == 1 { &one } else { &two };
            let mut body =
                json!({"model": "fast", "input": format!("turn {turn}"), "stream": stream});
            if let Some(id) = &previous {
                body["previous_response_id"] = json!(id);
            }
            // The first turn is pinned to a or b in turn; the follow-ups are pinned to the other
            // one, which the holder tag overrides.
            let first = conversation % 4 < 2;
            let pin = match (turn, first) {
                (1, true) | (2.., false) => "a/ma",
                _ => "b/mb",
            };
            let resp = client()
                .post(proxy.url("/v1/responses"))
                .header("x-session-affinity", pin)
                .json(&body)
                .send()
                .await
                .unwrap();
            assert_eq!(
                resp.status(),
                200,
                "conversation {conversation} turn {turn}"
            );
            let by = served_by(&resp);
            let held = holder.get_or_insert_with(|| by.clone());
            assert_eq!(&by, held, "conversation {conversation} turn {turn} moved");
            let response = if stream {
                let all = events(&resp.text().await.unwrap());
                let created = &all[0]["response"]["id"];
                let done = all.last().unwrap();
                assert_eq!(done["type"], "response.completed");
                assert_eq!(&done["response"]["id"], created);
                done["response"].clone()
            } else {
                let v: Value = resp.json().await.unwrap();
                let text = v["output"][0]["content"][0]["text"].as_str().unwrap();
                let expected = match turn {
                    1 => format!("Hello from {by}"),
                    n => format!("Hello from {by}, turn {n}"),
                };
                assert_eq!(text, expected);
                v
            };
            let id = response["id"].as_str().unwrap().to_string();
            let own = provider_id(&id, &by).to_string();
            assert!(own.starts_with("resp_sim_"), "{own}");
            previous = Some(id);
        }
        holders.push(holder.unwrap());
    }
    // The provider received its own ids, never the tagged ones.
    for sim in [&a, &b] {
        for req in sim.requests() {
            let v: Value = serde_json::from_slice(&req.body).unwrap();
            if let Some(id) = v["previous_response_id"].as_str() {
                assert!(untag(id).is_none(), "a provider received a tagged id {id}");
                assert!(id.starts_with("resp_sim_"));
            }
        }
    }
    // Each provider held half the conversations, streamed and not.
    let expected: Vec<&str> = (0..12).map(|c| if c % 4 < 2 { "a" } else { "b" }).collect();
    assert_eq!(holders, expected);
    let metrics = one.metrics_text().await;
    let held: f64 = metrics
        .lines()
        .filter(|l| l.starts_with("sturnus_routes_total{") && l.contains("route=\"held_object\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    // Each sidecar routed every other follow-up: 12 of the 24.
    assert_eq!(held, 12.0, "{metrics}");
    // Access lines are written in batches (within 50 ms); a few polls find them.
    let mut logs = String::new();
    for _ in 0..40 {
        logs = one.logs();
        if logs.contains("\"route\":\"held_object\"")
            && logs.contains("\"route\":\"session_affinity\"")
        {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(logs.contains("\"route\":\"held_object\""), "{logs}");
    assert!(logs.contains("\"route\":\"session_affinity\""), "{logs}");
}

#[tokio::test]
async fn retrieve_input_items_cancel_and_delete_reach_the_issuer_through_either_sidecar() {
    let (a, b, one, two) = two_sidecars().await;
    let resp = create(&one, &json!({"model": "fast", "input": "keep me"})).await;
    assert_eq!(resp.status(), 200);
    let holder = served_by(&resp);
    let created: Value = resp.json().await.unwrap();
    let id = created["id"].as_str().unwrap().to_string();
    provider_id(&id, &holder);
    let (issuer, other) = if holder == "a" { (&a, &b) } else { (&b, &a) };
    let (issuer_before, other_before) = (issuer.request_count(), other.request_count());

    let got: Value = call_json(&two, reqwest::Method::GET, &format!("/v1/responses/{id}")).await;
    assert_eq!(got["id"], id.as_str());
    assert_eq!(got["status"], "completed");

    let items = call(
        &two,
        reqwest::Method::GET,
        &format!("/v1/responses/{id}/input_items?limit=5"),
    )
    .await;
    assert_eq!(items.status(), 200);
    let items: Value = items.json().await.unwrap();
    assert_eq!(items["object"], "list");
    assert_eq!(items["data"][0]["content"][0]["text"], "keep me");

    // A synchronous response cannot be cancelled: the provider's 400 comes back as it is.
    let cancel = call(
        &one,
        reqwest::Method::POST,
        &format!("/v1/responses/{id}/cancel"),
    )
    .await;
    assert_eq!(cancel.status(), 400);
    let cancel: Value = cancel.json().await.unwrap();
    assert_eq!(
        cancel["error"]["message"],
        "Cannot cancel a synchronous response."
    );

    let deleted: Value = call_json(
        &two,
        reqwest::Method::DELETE,
        &format!("/v1/responses/{id}"),
    )
    .await;
    assert_eq!(
        deleted,
        json!({"id": id, "object": "response.deleted", "deleted": true})
    );
    let gone = call(&one, reqwest::Method::GET, &format!("/v1/responses/{id}")).await;
    assert_eq!(gone.status(), 404);
    assert_eq!(issuer.request_count(), issuer_before + 5);
    assert_eq!(other.request_count(), other_before);
}

#[tokio::test]
async fn background_responses_poll_to_completion_resume_their_stream_and_cancel() {
    let (_a, _b, one, two) = two_sidecars().await;
    let resp = create(
        &one,
        &json!({"model": "fast", "input": "later", "background": true}),
    )
    .await;
    let holder = served_by(&resp);
    let queued: Value = resp.json().await.unwrap();
    assert_eq!(queued["status"], "queued");
    let id = queued["id"].as_str().unwrap().to_string();
    provider_id(&id, &holder);
    let mut seen = Vec::new();
    for _ in 0..5 {
        let polled: Value =
            call_json(&two, reqwest::Method::GET, &format!("/v1/responses/{id}")).await;
        assert_eq!(polled["id"], id.as_str());
        seen.push(polled["status"].as_str().unwrap().to_string());
        if polled["status"] == "completed" {
            break;
        }
    }
    assert_eq!(seen, ["in_progress", "completed"]);

    let resumed = call(
        &two,
        reqwest::Method::GET,
        &format!("/v1/responses/{id}?stream=true&starting_after=1"),
    )
    .await;
    assert_eq!(resumed.status(), 200);
    assert!(resumed.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    let replayed = events(&resumed.text().await.unwrap());
    assert!(!replayed.is_empty());
    assert!(replayed
        .iter()
        .all(|e| e["sequence_number"].as_u64().unwrap() > 1));
    let last = replayed.last().unwrap();
    assert_eq!(last["type"], "response.completed");
    assert_eq!(last["response"]["id"], id.as_str());

    let started = create(
        &two,
        &json!({"model": "fast", "input": "stop me", "background": true}),
    )
    .await;
    let started: Value = started.json().await.unwrap();
    let id = started["id"].as_str().unwrap();
    let cancelled: Value = call_json(
        &one,
        reqwest::Method::POST,
        &format!("/v1/responses/{id}/cancel"),
    )
    .await;
    assert_eq!(cancelled["status"], "cancelled");
    assert_eq!(cancelled["id"], id);
}

#[tokio::test]
async fn tampered_foreign_and_stale_ids_get_a_clear_404_and_reach_no_provider() {
    let (a, b, one, _two) = two_sidecars().await;
    let resp = create(&one, &json!({"model": "fast", "input": "x"})).await;
    let created: Value = resp.json().await.unwrap();
    let id = created["id"].as_str().unwrap().to_string();
    let mut tampered = id.clone().into_bytes();
    let at = tampered.len() - 3;
    tampered[at] = if tampered[at] == b'0' { b'1' } else { b'0' };
    let tampered = String::from_utf8(tampered).unwrap();
    let stale = HolderTag::of("retired", "m").tag("resp_sim_6_1");
    let before = (a.request_count(), b.request_count());
    for (bad, code) in [
        (tampered.as_str(), "response_id_unrecognised"),
        (
            "resp_67ccd2bed1ec8190b14f964abc0542670bb6a6b452d3795b",
            "response_id_unrecognised",
        ),
        (stale.as_str(), "response_holder_not_configured"),
    ] {
        for (method, path) in [
            ("GET", format!("/v1/responses/{bad}")),
            ("DELETE", format!("/v1/responses/{bad}")),
            ("POST", format!("/v1/responses/{bad}/cancel")),
            ("GET", format!("/v1/responses/{bad}/input_items")),
        ] {
            let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
            let resp = client()
                .request(method.clone(), one.url(&path))
                .send()
                .await
                .unwrap();
            assert_eq!(resp.status(), 404, "{method} {path}");
            let v: Value = resp.json().await.unwrap();
            assert_eq!(v["error"]["code"], code, "{method} {path}: {v}");
            assert_eq!(v["error"]["type"], "invalid_request_error");
        }
    }
    // A follow-up to a stale holder is refused the same way; nothing is forwarded.
    let resp = create(
        &one,
        &json!({"model": "fast", "input": "x", "previous_response_id": stale}),
    )
    .await;
    assert_eq!(resp.status(), 400);
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["error"]["code"], "previous_response_not_found");
    assert_eq!(v["error"]["param"], "previous_response_id");
    assert_eq!((a.request_count(), b.request_count()), before);

    // An untagged previous_response_id is forwarded unchanged and routed as usual: the
    // provider that does not hold it answers its own 400, which comes back as it is.
    let resp = create(
        &one,
        &json!({"model": "fast", "input": "x", "previous_response_id": "resp_direct_1"}),
    )
    .await;
    assert_eq!(resp.status(), 400);
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["error"]["code"], "previous_response_not_found");
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .contains("'resp_direct_1'"));
    assert_eq!(
        a.request_count() + b.request_count(),
        before.0 + before.1 + 1
    );
}

#[tokio::test]
async fn the_holder_answers_even_while_it_fails_and_its_answer_comes_back_as_it_is() {
    let (a, b, one, two) = two_sidecars().await;
    let resp = create(&one, &json!({"model": "fast", "input": "x"})).await;
    let holder = served_by(&resp);
    let created: Value = resp.json().await.unwrap();
    let id = created["id"].as_str().unwrap().to_string();
    let (issuer, other) = if holder == "a" { (&a, &b) } else { (&b, &a) };
    issuer.behaviour.set_fault(Fault::Status(503));
    let other_before = other.request_count();
    for _ in 0..4 {
        let resp = create(
            &two,
            &json!({"model": "fast", "input": "y", "previous_response_id": id}),
        )
        .await;
        assert_eq!(resp.status(), 503);
        assert_eq!(served_by(&resp), holder);
        let v: Value = resp.json().await.unwrap();
        assert_eq!(v["error"]["message"], "simulated failure");
    }
    assert_eq!(other.request_count(), other_before);
    issuer.behaviour.set_fault(Fault::None);
    let resp = create(
        &two,
        &json!({"model": "fast", "input": "y", "previous_response_id": id}),
    )
    .await;
    assert_eq!(resp.status(), 200);
    assert_eq!(served_by(&resp), holder);
}

#[tokio::test]
async fn one_alias_is_served_in_openais_model_shape() {
    let (_a, _b, one, _two) = two_sidecars().await;
    let resp = call(&one, reqwest::Method::GET, "/v1/models/fast").await;
    assert_eq!(resp.status(), 200);
    let v: Value = resp.json().await.unwrap();
    assert_eq!(
        v,
        json!({"id": "fast", "object": "model", "created": 0, "owned_by": "sturnus"})
    );
    let resp = call(&one, reqwest::Method::GET, "/v1/models/slow").await;
    assert_eq!(resp.status(), 404);
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["error"]["code"], "model_not_found");
    let status = one.status().await;
    let paths: Vec<&str> = status["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap())
        .collect();
    for path in [
        "/v1/responses/{id}",
        "/v1/responses/{id}/cancel",
        "/v1/responses/{id}/input_items",
        "/v1/models/{alias}",
    ] {
        assert!(paths.contains(&path), "{paths:?}");
    }
}

/// Runs `program` with `args`; `None` (with the reason printed) when it cannot run.
fn run(program: &str, args: &[&str], env: &[(&str, String)]) -> Option<std::process::Output> {
    let mut command = std::process::Command::new(program);
    command.args(args);
    for (k, v) in env {
        command.env(k, v);
    }
    match command.output() {
        Ok(out) => Some(out),
        Err(e) => {
            println!("skipped: cannot run {program}: {e}");
            None
        }
    }
}

/// The Python that has the `openai` package, installing it with `pip --user` when missing;
/// `None` when it cannot be installed.
fn python_with_openai() -> Option<&'static str> {
    let python = "python3";
    let has = |p| run(p, &["-c", "import openai"], &[]).is_some_and(|o| o.status.success());
    if has(python) {
        return Some(python);
    }
    let installed = run(
        python,
        &["-m", "pip", "install", "--user", "--quiet", "openai"],
        &[],
    )
    .is_some_and(|o| o.status.success());
    if installed && has(python) {
        Some(python)
    } else {
        println!("skipped: the openai Python SDK cannot be installed");
        None
    }
}

/// What the SDK scripts do, in either language: create, continue, retrieve, list input items,
/// run a background response to completion, delete; they print the ids they saw as JSON.
const PYTHON_SCRIPT: &str = r#"
import json, os, openai
client = openai.OpenAI(base_url=os.environ["BASE_ONE"], api_key="unused")
other = openai.OpenAI(base_url=os.environ["BASE_TWO"], api_key="unused")
first = client.responses.create(model="fast", input="hi")
second = other.responses.create(model="fast", input="more", previous_response_id=first.id)
third = client.responses.create(model="fast", input="again", previous_response_id=second.id)
got = other.responses.retrieve(first.id)
items = other.responses.input_items.list(first.id)
bg = client.responses.create(model="fast", input="later", background=True)
polled = [other.responses.retrieve(bg.id).status for _ in range(2)]
deleted = other.responses.delete(third.id)
model = client.models.retrieve("fast")
print(json.dumps({
    "ids": [first.id, second.id, third.id],
    "retrieved": got.id,
    "text": third.output_text,
    "items": [i.id for i in items.data],
    "background": [bg.id, bg.status] + polled,
    "deleted": deleted is None,
    "model": model.id,
}))
"#;

const NODE_SCRIPT: &str = r#"
const OpenAI = require(process.env.OPENAI_MODULE);
(async () => {
  const client = new OpenAI({ baseURL: process.env.BASE_ONE, apiKey: "unused" });
  const other = new OpenAI({ baseURL: process.env.BASE_TWO, apiKey: "unused" });
  const first = await client.responses.create({ model: "fast", input: "hi" });
  const second = await other.responses.create({ model: "fast", input: "more", previous_response_id: first.id });
  const third = await client.responses.create({ model: "fast", input: "again", previous_response_id: second.id });
  const got = await other.responses.retrieve(first.id);
  const items = await other.responses.inputItems.list(first.id);
  const bg = await client.responses.create({ model: "fast", input: "later", background: true });
  const polled = [(await other.responses.retrieve(bg.id)).status, (await other.responses.retrieve(bg.id)).status];
  await other.responses.delete(third.id);
  const model = await client.models.retrieve("fast");
  console.log(JSON.stringify({
    ids: [first.id, second.id, third.id],
    retrieved: got.id,
    text: third.output_text,
    items: items.data.map((i) => i.id),
    background: [bg.id, bg.status, ...polled],
    deleted: true,
    model: model.id,
  }));
})().catch((e) => { console.error(e); process.exit(1); });
"#;

/// Checks what an SDK script printed.
fn check_sdk_report(out: &std::process::Output) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_str(stdout.trim()).unwrap();
    let ids: Vec<&str> = v["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i.as_str().unwrap())
        .collect();
    let holders: Vec<_> = ids.iter().map(|id| untag(id).unwrap().holder).collect();
    assert!(holders.windows(2).all(|w| w[0] == w[1]), "{v}");
    assert_eq!(v["retrieved"], ids[0]);
    assert!(v["text"].as_str().unwrap().ends_with(", turn 3"), "{v}");
    assert!(v["items"][0].as_str().unwrap().starts_with("msg_in_"));
    assert_eq!(v["background"][1], "queued");
    assert_eq!(v["background"][2], "in_progress");
    assert_eq!(v["background"][3], "completed");
    assert!(untag(v["background"][0].as_str().unwrap()).is_some());
    assert_eq!(v["deleted"], true);
    assert_eq!(v["model"], "fast");
}

#[tokio::test]
async fn tagged_ids_survive_the_openai_python_sdk() {
    let Some(python) = python_with_openai() else {
        return;
    };
    let (_a, _b, one, two) = two_sidecars().await;
    let env = [("BASE_ONE", one.url("/v1")), ("BASE_TWO", two.url("/v1"))];
    let out = tokio::task::spawn_blocking(move || {
        run(python, &["-c", PYTHON_SCRIPT], &env).expect("python3 runs")
    })
    .await
    .unwrap();
    check_sdk_report(&out);
}

/// The directory holding the `openai` npm package, installing it there when missing; `None`
/// when npm cannot install it.
fn node_openai_module() -> Option<String> {
    let dir = std::env::temp_dir().join("sturnus-node-openai");
    let module = dir.join("node_modules").join("openai");
    if !module.exists() {
        std::fs::create_dir_all(&dir).ok()?;
        let dir = dir.to_string_lossy().to_string();
        let installed = run(
            "npm",
            &[
                "install",
                "--silent",
                "--no-audit",
                "--no-fund",
                "--prefix",
                &dir,
                "openai",
            ],
            &[],
        )
        .is_some_and(|o| o.status.success());
        if !installed {
            println!("skipped: the openai Node SDK cannot be installed");
            return None;
        }
    }
    Some(module.to_string_lossy().to_string())
}

#[tokio::test]
async fn tagged_ids_survive_the_openai_node_sdk() {
    let Some(module) = node_openai_module() else {
        return;
    };
    let (_a, _b, one, two) = two_sidecars().await;
    let env = [
        ("BASE_ONE", one.url("/v1")),
        ("BASE_TWO", two.url("/v1")),
        ("OPENAI_MODULE", module),
    ];
    let Some(out) = tokio::task::spawn_blocking(move || run("node", &["-e", NODE_SCRIPT], &env))
        .await
        .unwrap()
    else {
        return;
    };
    check_sdk_report(&out);
}
