//! The run viewer's (`/ui`) browser scenarios, each a function of a [`UiTarget`] (a host's
//! base URL and key), so the embedded host (tests/e2e_ui.rs) and `trellis-aws-local` behind
//! its stage `/v` play the same ones. They select only what notes' UI contract names
//! (`form#sign-in`, `svg#graph g.node[data-node-id][data-state]`, `form#interrupt`, …).
//!
//! Waits poll the page, bounded by [`browser::WAIT`]; nothing asserts on timing.

use serde_json::{json, Value};

use super::browser::Browser;

/// A host the viewer is opened on.
pub struct UiTarget {
    /// `http://ADDR` (embedded) or `http://ADDR/v` (behind the stage), no trailing `/`.
    pub base: String,
    /// A key with every scope.
    pub key: String,
    /// A prefix for screenshot names (`embedded`, `aws`).
    pub label: String,
}

impl UiTarget {
    /// A target at `base` with `key`; screenshots are named `LABEL-STAGE.png`.
    pub fn new(base: impl Into<String>, key: impl Into<String>, label: &str) -> Self {
        Self { base: base.into().trim_end_matches('/').to_owned(), key: key.into(), label: label.to_owned() }
    }

    /// The viewer's page, `BASE/ui/`.
    pub fn page(&self) -> String {
        format!("{}/ui/", self.base)
    }

    /// `METHOD BASE+PATH` with the key and an optional JSON body: the status and the JSON answer.
    pub async fn request(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
        let mut request = reqwest::Client::new().request(method, format!("{}{path}", self.base)).bearer_auth(&self.key);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.expect("request sent");
        let status = response.status().as_u16();
        let text = response.text().await.unwrap_or_default();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// Registers `definition` over HTTP.
    pub async fn register(&self, definition: &Value) {
        let (status, body) = self.request(reqwest::Method::POST, "/v1/workflows", Some(definition.clone())).await;
        assert!(status == 200 || status == 201, "register {}: {status} {body}", definition["id"]);
    }

    /// Starts `workflow` with `inputs` over HTTP; the run id.
    pub async fn start_run(&self, workflow: &str, inputs: Value) -> String {
        let body = json!({"workflowId": workflow, "inputs": inputs});
        let (status, created) = self.request(reqwest::Method::POST, "/v1/runs", Some(body)).await;
        assert_eq!(status, 201, "start {workflow}: {created}");
        created["runId"].as_str().expect("a runId").to_owned()
    }

    /// The run's snapshot over HTTP.
    pub async fn snapshot(&self, run_id: &str) -> Value {
        self.request(reqwest::Method::GET, &format!("/v1/runs/{run_id}"), None).await.1
    }

    fn shot(&self, stage: &str) -> String {
        format!("{}-{stage}", self.label)
    }
}

/// A unique suffix, so scenarios can share a long-lived host.
fn unique() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..12].to_owned()
}

/// A delay, an approval gate after it, and a no-op after that: the node before the gate turns
/// `completed` while the page watches.
fn gated_workflow(id: &str) -> Value {
    json!({
        "id": id, "name": "UI gated flow", "version": "1",
        "nodes": [
            {"id": "wait", "typeId": "core.delay", "config": {"durationMs": 1500}},
            {"id": "gate", "typeId": "core.approvalGate",
             "config": {"title": "UI approval", "description": "Accept to finish.", "actions": ["accept", "reject"]}},
            {"id": "done", "typeId": "core.noop"}
        ],
        "edges": [
            {"id": "wait-gate", "sourceNodeId": "wait", "targetNodeId": "gate"},
            {"id": "gate-done", "sourceNodeId": "gate", "targetNodeId": "done"}
        ]
    })
}

/// Moves the page to `hash` without reloading it.
async fn route(browser: &Browser, hash: &str) {
    browser.js("location.hash = arguments[0];", vec![json!(hash)]).await;
}

/// Opens the viewer and signs in with the key typed into `#key`; the key then lives in
/// sessionStorage (`trellis.key`) only: not in the URL, a cookie or localStorage.
pub async fn sign_in(browser: &Browser, target: &UiTarget) {
    browser.goto(&target.page()).await;
    browser.wait_for("form#sign-in", "the sign-in form").await;
    assert_eq!(
        browser.js("return document.querySelector('input#key').type;", Vec::new()).await,
        "password",
        "the key field hides what is typed"
    );
    browser.screenshot(&target.shot("1-sign-in")).await;
    // A wrong key: the host's 401 brings the sign-in form back with the server's message.
    let field = browser.wait_for("form#sign-in input#key", "the key field").await;
    field.send_keys("not-the-key").await.expect("a wrong key is typed");
    browser.click("form#sign-in button[type=submit]", "the sign-in button").await;
    let refused = browser
        .wait_until(
            "const e = document.querySelector('form#sign-in #sign-in-error') || document.querySelector('#sign-in-error');
             return e && e.textContent.trim() !== '' && document.querySelector('form#sign-in input#key') ? e.textContent : null;",
            "a wrong key shows the sign-in error",
        )
        .await;
    eprintln!("ui: a wrong key reads: {refused}");
    browser.screenshot(&target.shot("1-sign-in-refused")).await;
    let field = browser.wait_for("form#sign-in input#key", "the key field").await;
    field.clear().await.expect("the key field is cleared");
    field.send_keys(&target.key).await.expect("the key is typed");
    browser.click("form#sign-in button[type=submit]", "the sign-in button").await;
    browser.wait_for("nav#nav a[data-nav=runs]", "the nav after sign-in").await;
    browser.wait_for("nav#nav a[data-nav=workflows]", "the nav after sign-in").await;
    browser.wait_for("nav#nav button#sign-out", "the sign-out button").await;
    let stored = browser.js("return sessionStorage.getItem('trellis.key');", Vec::new()).await;
    assert_eq!(stored, target.key.as_str(), "the key is kept in sessionStorage as trellis.key");
    let places = browser
        .js(
            "const local = {}; for (let i = 0; i < localStorage.length; i++) { const k = localStorage.key(i); local[k] = localStorage.getItem(k); }
             return {href: location.href, cookie: document.cookie, local: JSON.stringify(local)};",
            Vec::new(),
        )
        .await;
    for place in ["href", "cookie", "local"] {
        let text = places[place].as_str().unwrap_or_default();
        assert!(!text.contains(&target.key), "the key leaked into {place}: {text}");
    }
}

/// Starts a gated run from `form#start-run` on its workflow's page, lands on `#/runs/ID`, sees
/// the delay turn `completed` and the gate `waiting` on the graph without a reload, accepts the
/// approval in `form#interrupt` and sees the run `completed`. Returns the workflow and run ids.
pub async fn approval_run(browser: &Browser, target: &UiTarget) -> (String, String) {
    let workflow = format!("ui-gated-{}", unique());
    target.register(&gated_workflow(&workflow)).await;
    route(browser, &format!("#/workflows/{workflow}")).await;
    browser.wait_for("section#workflow-page svg#graph g.node[data-node-id=gate]", "the workflow's graph").await;
    // A page reload would drop this.
    browser.js("window.__marker = 1;", Vec::new()).await;
    let inputs = browser.wait_for("form#start-run textarea#start-inputs", "the start form's inputs").await;
    inputs.clear().await.expect("the inputs are cleared");
    inputs.send_keys(r#"{"note": "from the ui test"}"#).await.expect("the inputs are typed");
    browser.screenshot(&target.shot("2-workflow")).await;
    let submit = browser.wait_for("form#start-run [type=submit]", "the start button").await;
    submit.click().await.expect("the run starts");

    let hash = browser
        .wait_until("return /^#\\/runs\\/[^/]+$/.test(location.hash) ? location.hash : null;", "land on #/runs/ID")
        .await;
    let run_id = hash.as_str().unwrap().trim_start_matches("#/runs/").to_owned();
    let page = format!("section#run-page[data-run-id=\"{run_id}\"]");
    browser.wait_for(&page, "the run page").await;
    browser.wait_for(&format!("{page} svg#graph g.node[data-node-id=done]"), "the run's graph").await;
    for node in ["wait", "gate", "done"] {
        let text = browser.text_of(&format!("svg#graph g.node[data-node-id={node}]")).await;
        assert!(text.is_some_and(|text| text.contains(node)), "node {node} shows its id");
    }
    let state =
        browser.js("return document.querySelector('g.node[data-node-id=wait]').dataset.state;", Vec::new()).await;
    eprintln!("ui: the delay node was {state} when the run page drew it");
    browser.screenshot(&target.shot("3-run-started")).await;

    browser.wait_for("svg#graph g.node[data-node-id=wait][data-state=completed]", "the delay turns completed").await;
    browser.wait_for("svg#graph g.node[data-node-id=gate][data-state=waiting]", "the gate turns waiting").await;
    browser.wait_for("form#interrupt[data-node-id=gate]", "the approval form").await;
    assert_eq!(browser.js("return window.__marker;", Vec::new()).await, 1, "the page was not reloaded");
    assert!(browser.exists("ol#timeline li[data-type]").await, "the timeline lists events");
    browser
        .wait_until(
            "const e = document.querySelector('#live'); return e && ['streaming', 'polling'].includes(e.dataset.state);",
            "#live follows the events while the run is open",
        )
        .await;
    browser.screenshot(&target.shot("4-waiting")).await;

    browser.click("form#interrupt button[data-action=accept]", "the accept button").await;
    browser.wait_for(&format!("{page}[data-status=completed]"), "the run turns completed").await;
    browser.wait_for("svg#graph g.node[data-node-id=done][data-state=completed]", "the last node completes").await;
    browser.wait_for("ol#timeline li[data-type=\"run.completed\"]", "the terminal event in the timeline").await;
    browser.wait_for("path.edge[data-from=wait][data-to=gate][data-state=taken]", "the taken edge").await;
    assert_eq!(browser.js("return window.__marker;", Vec::new()).await, 1, "the page was not reloaded");
    browser
        .wait_until("return document.querySelector('form#interrupt') === null;", "no pending interrupt once completed")
        .await;
    let inputs = browser.text_of("pre#variables").await.unwrap_or_default();
    assert!(inputs.contains("from the ui test"), "the inputs typed into the form seed the variables: {inputs}");
    browser.screenshot(&target.shot("5-completed")).await;
    assert_eq!(target.snapshot(&run_id).await["status"], "completed", "the host agrees");
    (workflow, run_id)
}

/// The runs list shows the run with its status; the workflows list shows the workflow and its
/// page draws one node per node of the definition and one edge per edge.
pub async fn lists(browser: &Browser, target: &UiTarget, workflow: &str, run_id: &str) {
    route(browser, "#/runs").await;
    browser.wait_for("section#runs-page table#runs", "the runs list").await;
    let status = format!("table#runs tr[data-run-id=\"{run_id}\"] td[data-field=status]");
    browser.wait_for(&status, "the run's row").await;
    let script =
        format!("const e = document.querySelector('{status}'); return e && e.textContent.includes('completed');");
    browser.wait_until(&script, "the row's status reads completed").await;
    let row = format!("table#runs tr[data-run-id=\"{run_id}\"] [data-field=workflow]");
    let named = browser.text_of(&row).await.unwrap_or_default();
    assert!(named.contains(workflow) || named.contains("UI gated flow"), "the row names the workflow: {named}");
    browser.screenshot(&target.shot("6-runs")).await;

    route(browser, "#/workflows").await;
    browser
        .wait_for(&format!("section#workflows-page tr[data-workflow-id=\"{workflow}\"]"), "the workflow's row")
        .await;
    browser.screenshot(&target.shot("7-workflows")).await;
    route(browser, &format!("#/workflows/{workflow}")).await;
    browser.wait_for("section#workflow-page svg#graph g.node[data-node-id=done]", "the workflow's graph").await;
    assert_eq!(browser.count("svg#graph g.node").await, 3, "one node per workflow node");
    assert_eq!(browser.count("svg#graph path.edge").await, 2, "one edge per workflow edge");
    browser.screenshot(&target.shot("8-workflow-graph")).await;
}

/// Markup in a run's inputs (and a workflow's name) is shown as text: nothing runs, no element
/// is made of it.
pub async fn xss(browser: &Browser, target: &UiTarget) {
    let image = r#"<img src=x onerror="window.__xss=1">"#;
    let script = "<script>window.__xss=2</script>";
    let workflow = format!("ui-xss-{}", unique());
    let mut definition = gated_workflow(&workflow);
    definition["name"] = json!(format!("XSS {image} {script}"));
    target.register(&definition).await;
    let run_id = target.start_run(&workflow, json!({"image": image, "script": script})).await;
    route(browser, &format!("#/runs/{run_id}")).await;
    browser.wait_for(&format!("section#run-page[data-run-id=\"{run_id}\"]"), "the run page").await;
    let shown = browser
        .wait_until(
            "const e = document.querySelector('pre#variables'); return e && e.textContent.includes('onerror') ? e.textContent : null;",
            "the inputs shown in pre#variables",
        )
        .await;
    let shown = shown.as_str().unwrap_or_default();
    // Pretty JSON escapes the inner quotes; the markup itself is literal.
    assert!(shown.contains("<img src=x onerror="), "the image markup appears as text: {shown}");
    assert!(shown.contains(script), "the script markup appears as text: {shown}");
    browser.screenshot(&target.shot("9-xss-run")).await;
    route(browser, "#/workflows").await;
    let row = format!("tr[data-workflow-id=\"{workflow}\"]");
    browser.wait_for(&row, "the XSS workflow's row").await;
    let text = browser
        .js(
            "const row = document.querySelector(arguments[0]); row.scrollIntoView(); return row.textContent;",
            vec![json!(row)],
        )
        .await;
    assert!(
        text.as_str().is_some_and(|text| text.contains(image) && text.contains(script)),
        "the name as text: {text}"
    );
    browser.screenshot(&target.shot("10-xss-workflows")).await;
    assert_eq!(browser.js("return typeof window.__xss;", Vec::new()).await, "undefined", "no injected code ran");
    assert_eq!(browser.count("img[src=x]").await, 0, "no element was made of the markup");
    let scripts = browser
        .js("return Array.from(document.scripts).filter(s => s.textContent.includes('__xss')).length;", Vec::new())
        .await;
    assert_eq!(scripts, 0, "no script element was made of the markup");
}

/// The `/ui` responses carry the contract's headers; `/ui` redirects to `ui/`; an inline
/// script put into the page is refused by the CSP.
pub async fn csp(browser: &Browser, target: &UiTarget) {
    let http = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let redirect = http.get(format!("{}/ui", target.base)).send().await.expect("GET /ui");
    assert_eq!(redirect.status().as_u16(), 308, "/ui redirects");
    assert_eq!(redirect.headers().get("location").and_then(|v| v.to_str().ok()), Some("ui/"), "a relative Location");
    let index = http.get(target.page()).send().await.expect("GET /ui/");
    assert_eq!(index.status().as_u16(), 200);
    let header = |name: &str| index.headers().get(name).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
    assert_eq!(
        header("content-security-policy"),
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; \
         base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    );
    assert_eq!(header("x-content-type-options"), "nosniff");
    assert_eq!(header("referrer-policy"), "no-referrer");
    assert_eq!(header("cache-control"), "no-cache");
    assert!(header("content-type").starts_with("text/html"), "{}", header("content-type"));
    let missing = http.get(format!("{}/ui/no-such-asset.js", target.base)).send().await.expect("GET a missing asset");
    assert_eq!(missing.status().as_u16(), 404);

    browser.goto(&target.page()).await;
    browser.wait_for("body", "the page").await;
    browser
        .js(
            "window.__violations = 0; document.addEventListener('securitypolicyviolation', () => { window.__violations += 1; });
             const s = document.createElement('script'); s.textContent = 'window.__inline = 1;'; document.head.appendChild(s);",
            Vec::new(),
        )
        .await;
    browser.wait_until("return window.__violations > 0;", "the CSP reports the inline script").await;
    assert_eq!(
        browser.js("return typeof window.__inline;", Vec::new()).await,
        "undefined",
        "the inline script did not run"
    );
}

/// A run's row in the runs list follows its status live: answered over HTTP while the list is
/// open, the row turns `completed` without a reload.
pub async fn runs_live(browser: &Browser, target: &UiTarget) {
    let workflow = format!("ui-live-{}", unique());
    target.register(&gated_workflow(&workflow)).await;
    let run_id = target.start_run(&workflow, json!({})).await;
    route(browser, "#/runs").await;
    let status = format!("table#runs tr[data-run-id=\"{run_id}\"] td[data-field=status]");
    let waiting =
        format!("const e = document.querySelector('{status}'); return e && e.textContent.includes('waiting');");
    browser.wait_until(&waiting, "the new run's row reads waiting").await;
    browser.js("window.__marker = 2;", Vec::new()).await;
    let path = format!("/v1/runs/{run_id}/interrupts/gate");
    let (answered, body) =
        target.request(reqwest::Method::POST, &path, Some(json!({"resumeValue": {"action": "accept"}}))).await;
    assert_eq!(answered, 200, "accepted over HTTP: {body}");
    let completed =
        format!("const e = document.querySelector('{status}'); return e && e.textContent.includes('completed');");
    browser.wait_until(&completed, "the row turns completed").await;
    assert_eq!(browser.js("return window.__marker;", Vec::new()).await, 2, "the list was not reloaded");
    // Deep links survive a reload: the key is still in sessionStorage, the hash names the run.
    browser.goto(&format!("{}#/runs/{run_id}", target.page())).await;
    browser
        .wait_for(&format!("section#run-page[data-run-id=\"{run_id}\"][data-status=completed]"), "the run page")
        .await;
    browser
        .wait_until(
            "const e = document.querySelector('#live'); return e && e.dataset.state === 'ended';",
            "#live ended",
        )
        .await;
}

/// A `custom` interrupt with a resume schema: the form has one field per property of the
/// matching kind, the server's refusal shows in `#interrupt-error`, a good answer resumes the
/// run with typed values. The start form shows a bad JSON and the server's refusal in
/// `#start-error`.
pub async fn answer_form(browser: &Browser, target: &UiTarget) {
    let workflow = format!("ui-answer-{}", unique());
    let schema = json!({
        "type": "object",
        "required": ["reviewer", "score"],
        "properties": {
            "reviewer": {"type": "string"},
            "score": {"type": "integer"},
            "ship": {"type": "boolean"},
            "tier": {"type": "string", "enum": ["gold", "silver"]},
            "extra": {"type": "object", "required": ["ticket"]}
        }
    });
    target
        .register(&json!({
            "id": workflow, "name": "UI answer flow", "version": "1",
            "variables": [{"name": "who", "type": "string", "required": true}],
            "nodes": [
                {"id": "ask", "typeId": "core.interrupt",
                 "config": {"kind": "custom", "data": {"customKind": "review"}, "resumeSchema": schema}},
                {"id": "done", "typeId": "core.noop"}
            ],
            "edges": [{"id": "ask-done", "sourceNodeId": "ask", "targetNodeId": "done"}]
        }))
        .await;

    route(browser, &format!("#/workflows/{workflow}")).await;
    let inputs = browser.wait_for("form#start-run textarea#start-inputs", "the start form").await;
    let submit = browser.wait_for("form#start-run [type=submit]", "the start button").await;
    inputs.clear().await.expect("cleared");
    inputs.send_keys("{not json").await.expect("typed");
    submit.click().await.expect("submitted");
    browser
        .wait_until("const e = document.querySelector('#start-error'); return e && e.textContent.trim();", "a bad JSON")
        .await;
    inputs.clear().await.expect("cleared");
    inputs.send_keys("{}").await.expect("typed");
    let body = json!({"workflowId": workflow, "inputs": {}});
    let (status, envelope) = target.request(reqwest::Method::POST, "/v1/runs", Some(body)).await;
    assert_eq!(status, 400, "a missing required variable is refused: {envelope}");
    let message = envelope["message"].as_str().expect("the envelope's message").to_owned();
    submit.click().await.expect("submitted");
    let script = format!(
        "const e = document.querySelector('#start-error'); return e && e.textContent.includes({}) ? e.textContent : null;",
        json!(message)
    );
    let refused = browser.wait_until(&script, "the envelope's message in #start-error").await;
    eprintln!("ui: the start form shows: {refused}");
    assert!(browser.exists("section#workflow-page").await, "a refused start stays on the workflow page");
    browser.screenshot(&target.shot("12-start-error")).await;

    let run_id = target.start_run(&workflow, json!({"who": "ui"})).await;
    route(browser, &format!("#/runs/{run_id}")).await;
    let form = "form#interrupt[data-node-id=ask][data-kind=custom]";
    browser.wait_for(form, "the resume form").await;
    let kinds = browser
        .js(
            "const f = (n) => document.querySelector('form#interrupt [data-field=\"' + n + '\"]');
             const d = (e) => e ? e.tagName.toLowerCase() + (e.type ? ':' + e.type : '') : null;
             return {reviewer: d(f('reviewer')), score: d(f('score')), ship: d(f('ship')), tier: d(f('tier')),
                     extra: d(f('extra')), required: !!(f('reviewer') && (f('reviewer').required || f('reviewer').getAttribute('aria-required') === 'true'))};",
            Vec::new(),
        )
        .await;
    assert_eq!(
        kinds,
        json!({"reviewer": "input:text", "score": "input:number", "ship": "input:checkbox",
               "tier": "select:select-one", "extra": "textarea:textarea", "required": true}),
        "one field per property, by type"
    );
    let field = |name: &str| format!("form#interrupt [data-field={name}]");
    browser.wait_for(&field("reviewer"), "reviewer").await.send_keys("Ada").await.expect("typed");
    let score = browser.wait_for(&field("score"), "score").await;
    score.clear().await.expect("cleared");
    score.send_keys("4").await.expect("typed");
    browser.wait_for(&field("ship"), "ship").await.click().await.expect("ticked");
    // Options are chosen by their text (the contract fixes no value attribute).
    let silver = "//form[@id='interrupt']//select[@data-field='tier']/option[normalize-space(.)='silver']";
    let option = browser.client.find(fantoccini::Locator::XPath(silver)).await.expect("the option silver");
    option.click().await.expect("chosen");
    let extra = browser.wait_for(&field("extra"), "extra").await;
    extra.clear().await.expect("cleared");
    extra.send_keys(r#"{"note": 1}"#).await.expect("typed");
    browser.screenshot(&target.shot("13-answer-form")).await;
    browser.click("form#interrupt button[data-action=answer]", "the answer button").await;
    let refused = browser
        .wait_until(
            "const e = document.querySelector('#interrupt-error'); return e && e.textContent.trim();",
            "the server's refusal",
        )
        .await;
    eprintln!("ui: the resume form shows: {refused}");
    browser.screenshot(&target.shot("14-answer-refused")).await;
    let extra = browser.wait_for(&field("extra"), "extra").await;
    extra.clear().await.expect("cleared");
    extra.send_keys(r#"{"ticket": "T-1"}"#).await.expect("typed");
    browser.click("form#interrupt button[data-action=answer]", "the answer button").await;
    browser
        .wait_for(
            &format!("section#run-page[data-run-id=\"{run_id}\"][data-status=completed]"),
            "the answered run completes",
        )
        .await;
    browser.screenshot(&target.shot("15-answered")).await;
    let path = format!("/v1/runs/{run_id}/events?streamMode=debug");
    let events = reqwest::Client::new()
        .get(format!("{}{path}", target.base))
        .bearer_auth(&target.key)
        .header("accept", "application/json")
        .send()
        .await
        .expect("events")
        .json::<Value>()
        .await
        .expect("a JSON list");
    let resolved =
        events["events"].as_array().into_iter().flatten().find(|event| event["type"] == "interrupt.resolved");
    let resolved = resolved.map(Value::to_string).unwrap_or_default();
    for typed in [r#""reviewer":"Ada""#, r#""score":4"#, r#""ship":true"#, r#""tier":"silver""#, r#""ticket":"T-1""#] {
        assert!(resolved.contains(typed), "the answer carries {typed}: {resolved}");
    }
}

/// A parent run lists its child run as `a.child-run`, which opens the child's page.
pub async fn child_runs(browser: &Browser, target: &UiTarget) {
    let child = format!("ui-child-{}", unique());
    let parent = format!("ui-parent-{}", unique());
    target
        .register(&json!({"id": child, "name": "UI child", "version": "1",
            "nodes": [{"id": "inner", "typeId": "core.noop"}]}))
        .await;
    target
        .register(&json!({"id": parent, "name": "UI parent", "version": "1",
            "nodes": [{"id": "call", "typeId": "core.subWorkflow", "config": {"workflowId": child}},
                      {"id": "after", "typeId": "core.noop"}],
            "edges": [{"id": "call-after", "sourceNodeId": "call", "targetNodeId": "after"}]}))
        .await;
    let run_id = target.start_run(&parent, json!({})).await;
    route(browser, &format!("#/runs/{run_id}")).await;
    browser
        .wait_for(&format!("section#run-page[data-run-id=\"{run_id}\"][data-status=completed]"), "the parent completes")
        .await;
    browser.wait_for("a.child-run[data-run-id]", "the child run's link").await;
    let child_id = browser.js("return document.querySelector('a.child-run').dataset.runId;", Vec::new()).await;
    let child_id = child_id.as_str().expect("a child run id").to_owned();
    let snapshot = target.snapshot(&run_id).await;
    let listed = snapshot["childRuns"].as_array().into_iter().flatten().any(|c| c["runId"] == child_id.as_str());
    assert!(listed, "the link names the parent's child run: {child_id} in {snapshot}");
    browser.screenshot(&target.shot("16-parent")).await;
    browser.click(&format!("a.child-run[data-run-id=\"{child_id}\"]"), "the child run's link").await;
    browser.wait_for(&format!("section#run-page[data-run-id=\"{child_id}\"]"), "the child's run page").await;
    browser.wait_for("svg#graph g.node[data-node-id=inner][data-state=completed]", "the child's graph").await;
}

/// A rerun's graph marks the nodes it took from its source (`trellis.node.replayed`): a GET
/// node against a local server, rerun with nothing changed, reads `data-replayed=true` with
/// its label, and the timeline lists the event; the server was called once.
pub async fn rerun_from_cache(browser: &Browser, target: &UiTarget) {
    let server = trellis_testkit::http_server::TestServer::start().await;
    server.route("/facts", vec![trellis_testkit::http_server::Reply::json(200, &json!({"fact": "cached"}))]);
    let workflow = format!("ui-rerun-{}", unique());
    target
        .register(&json!({"id": workflow, "name": "UI rerun", "version": "1",
            "nodes": [{"id": "fetch", "typeId": "core.http.request", "config": {"url": server.url("/facts")}},
                      {"id": "after", "typeId": "core.noop"}],
            "edges": [{"id": "fetch-after", "sourceNodeId": "fetch", "targetNodeId": "after"}]}))
        .await;
    let source = target.start_run(&workflow, json!({})).await;
    let mut completed = false;
    for _ in 0..100 {
        if target.snapshot(&source).await["status"] == "completed" {
            completed = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(completed, "the source completes");
    let (status, rerun) =
        target.request(reqwest::Method::POST, &format!("/v1/runs/{source}:rerun"), Some(json!({}))).await;
    assert_eq!(status, 201, "{rerun}");
    let rerun_id = rerun["runId"].as_str().expect("the rerun's id").to_owned();
    route(browser, &format!("#/runs/{rerun_id}")).await;
    browser
        .wait_for(
            &format!("section#run-page[data-run-id=\"{rerun_id}\"][data-status=completed]"),
            "the rerun completes",
        )
        .await;
    browser.wait_for("svg#graph g.node[data-node-id=fetch][data-replayed=true]", "the cached node's mark").await;
    assert_eq!(
        browser.text_of("svg#graph g.node[data-node-id=fetch] text.replayed").await.as_deref(),
        Some("from cache")
    );
    assert!(!browser.exists("svg#graph g.node[data-node-id=after][data-replayed]").await, "a pure node is computed");
    let timeline = browser.text_of("#timeline").await.unwrap_or_default();
    assert!(timeline.contains("trellis.node.replayed"), "{timeline}");
    assert_eq!(server.requests_to("/facts").len(), 1, "the rerun did not call the server");
    browser.screenshot(&target.shot("17-rerun-cache")).await;
}

/// "Sign out" forgets the key and shows the sign-in form again.
pub async fn sign_out(browser: &Browser, target: &UiTarget) {
    browser.click("nav#nav button#sign-out", "the sign-out button").await;
    browser.wait_for("form#sign-in input#key", "the sign-in form after signing out").await;
    let stored = browser.js("return sessionStorage.getItem('trellis.key');", Vec::new()).await;
    assert_eq!(stored, Value::Null, "signing out clears the key");
    browser.screenshot(&target.shot("11-signed-out")).await;
}

/// Every scenario in order on one browser.
pub async fn all(browser: &Browser, target: &UiTarget) {
    csp(browser, target).await;
    sign_in(browser, target).await;
    let (workflow, run_id) = approval_run(browser, target).await;
    lists(browser, target, &workflow, &run_id).await;
    xss(browser, target).await;
    runs_live(browser, target).await;
    answer_form(browser, target).await;
    child_runs(browser, target).await;
    rerun_from_cache(browser, target).await;
    sign_out(browser, target).await;
}
