//! The README's endpoint, error and metric tables, checked against the code: the endpoint list
//! and what the router serves, the error answers sturnus makes, and the metric registry.
//! (`tests/integration/cli.rs` checks the README's config blocks against
//! `conf/config.example.toml` and `sturnus check`.)

use crate::admin::{self, ENDPOINTS, METRICS_LISTENER_PATHS};
use crate::api::ApiError;
use crate::app::App;
use crate::catalog::Catalog;
use crate::config::Config;
use crate::observe::metrics::{Family, Metrics};
use crate::providers::CredentialError;
use crate::proxy::admission::{routed_suffix, ROUTED};
use crate::proxy::held_object::ObjectRequest;
use crate::routing::ErrorKind;
use http::Method;
use std::collections::BTreeMap;

const README: &str = include_str!("../README.md");

/// One alias, `fast`, over one provider: enough for the router and the registry.
const CONFIG: &str = r#"
[provider.p]
base_url = "http://127.0.0.1:9/v1"
[model]
fast = [{ provider = "p", model = "m" }]
"#;

/// The labels a metric has when the README's table names none.
const CANDIDATE_LABELS: [&str; 3] = ["alias", "model", "provider"];

fn config() -> Config {
    Config::parse(CONFIG, &|_| None).unwrap()
}

/// The cells of each row of the first table after the line `heading`, header and rule left out.
fn table(heading: &str) -> Vec<Vec<String>> {
    let (_, after) = README
        .split_once(&format!("\n{heading}\n"))
        .unwrap_or_else(|| panic!("README.md has no {heading}"));
    after
        .lines()
        .skip_while(|line| !line.starts_with('|'))
        .take_while(|line| line.starts_with('|'))
        .skip(2)
        .map(cells)
        .collect()
}

/// The cells of each row of the table whose header line is `header`, header and rule left out.
fn table_after(header: &str) -> Vec<Vec<String>> {
    let (_, after) = README
        .split_once(&format!("\n{header}\n"))
        .unwrap_or_else(|| panic!("README.md has no table headed {header}"));
    after
        .lines()
        .take_while(|line| line.starts_with('|'))
        .skip(1)
        .map(cells)
        .collect()
}

/// The cells of one table row, without the outer pipes.
fn cells(line: &str) -> Vec<String> {
    let inner = line.trim().trim_start_matches('|').trim_end_matches('|');
    inner.split(" | ").map(|c| c.trim().to_string()).collect()
}

/// The text inside each pair of backticks of `cell`.
fn code_spans(cell: &str) -> Vec<&str> {
    cell.split('`').skip(1).step_by(2).collect()
}

/// Whether the proxy listener serves `method` on `path`, asked of each part of the router in the
/// order a request meets them: the admin answers, the Responses API objects, the routed
/// endpoints.
fn served(app: &App, method: &Method, path: &str) -> bool {
    if let Some(answer) = admin::answer(method, path, app) {
        return (200..300).contains(&answer.status);
    }
    if let Some(object) = ObjectRequest::parse(method, path) {
        return object.is_ok();
    }
    routed_suffix(path).is_some() && method == Method::POST
}

#[test]
fn the_readme_endpoint_table_is_the_endpoint_list() {
    let mut readme = BTreeMap::new();
    for row in table("## Endpoints") {
        for path in code_spans(&row[0]) {
            readme.insert(path.to_string(), row[1].clone());
        }
    }
    let listed: BTreeMap<String, String> = ENDPOINTS
        .iter()
        .map(|(path, methods, _)| (path.to_string(), methods.to_string()))
        .collect();
    assert_eq!(readme, listed, "README's endpoint table (path -> methods)");
}

#[test]
fn the_endpoint_list_is_what_the_router_serves() {
    let app = App::new(config()).unwrap();
    let methods = [
        Method::GET,
        Method::POST,
        Method::PUT,
        Method::PATCH,
        Method::DELETE,
    ];
    for (path, listed, _) in ENDPOINTS {
        let concrete = path.replace("{id}", "resp_1").replace("{alias}", "fast");
        for method in &methods {
            let expected = listed.split(", ").any(|m| m == method.as_str());
            assert_eq!(
                served(&app, method, &concrete),
                expected,
                "{method} {concrete}: served by the router, listed in admin::ENDPOINTS"
            );
        }
    }
    for suffix in ROUTED {
        let path = format!("/v1{suffix}");
        let listed = ENDPOINTS.iter().any(|(p, ..)| *p == path);
        assert!(listed, "{path} is routed but not in admin::ENDPOINTS");
    }
    for path in METRICS_LISTENER_PATHS {
        let listed = ENDPOINTS.iter().any(|(p, ..)| *p == path);
        assert!(listed, "{path} is served but not in admin::ENDPOINTS");
    }
    for path in [
        "/",
        "/v1",
        "/v1/chat",
        "/v1/conversations",
        "/v1/responses/resp_1/other",
        "/v1/models/unknown",
        "/statusx",
    ] {
        for method in &methods {
            assert!(!served(&app, method, path), "{method} {path} is not listed");
        }
    }
}

/// The family a row of the README's metric table describes: the type cell is `kind`, then
/// either nothing (the candidate labels), `+ \`a\`` (the candidate labels and `a`), `\`a\` and
/// \`b\` only`, or `no labels`.
fn readme_family(row: &[String]) -> Family {
    let name = code_spans(&row[0]).concat();
    let cell = &row[1];
    let kind = cell
        .split(',')
        .next()
        .unwrap_or_default()
        .trim()
        .to_string();
    let named: Vec<String> = code_spans(cell).iter().map(|s| s.to_string()).collect();
    let labels = if cell.contains("no labels") {
        Vec::new()
    } else if cell.contains("only") {
        named
    } else {
        let mut all: Vec<String> = CANDIDATE_LABELS.iter().map(|s| s.to_string()).collect();
        all.extend(named);
        all
    };
    Family { name, kind, labels }
}

/// `family` with its labels sorted, for comparing label sets.
fn sorted(mut family: Family) -> Family {
    family.labels.sort();
    family
}

#[test]
fn the_readme_metric_table_is_the_registry() {
    let catalog = Catalog::build(&config()).unwrap();
    let metrics = Metrics::new(&catalog).unwrap();
    let registered: BTreeMap<String, Family> = metrics
        .families()
        .iter()
        .map(|f| (f.name.clone(), sorted(f.clone())))
        .collect();
    let readme: BTreeMap<String, Family> = table("## Metrics")
        .iter()
        .map(|row| sorted(readme_family(row)))
        .map(|f| (f.name.clone(), f))
        .collect();
    for name in registered.keys() {
        assert!(
            readme.contains_key(name),
            "{name} is registered but not in README's metric table"
        );
    }
    for name in readme.keys() {
        assert!(
            registered.contains_key(name),
            "{name} is in README's metric table but not registered"
        );
    }
    assert_eq!(
        readme, registered,
        "README's metric table (type and labels)"
    );
}

/// Every error answer sturnus makes itself: one of each `ApiError` constructor, and the
/// answer to each kind of transport failure.
fn every_error() -> Vec<ApiError> {
    let mut all = vec![
        ApiError::invalid_request("not JSON", None),
        ApiError::invalid_request("no model", Some("model")),
        ApiError::model_not_found("x"),
        ApiError::response_id_unrecognised("resp_1"),
        ApiError::response_holder_not_configured("resp_1", "000000"),
        ApiError::previous_response_elsewhere("resp_1", "fast"),
        ApiError::unknown_path("GET", "/x"),
        ApiError::method_not_allowed("GET", "/v1/chat/completions", "POST"),
        ApiError::body_too_large(1),
        ApiError::body_exceeds_budget(1),
        ApiError::budget_busy(1, 1, 1),
        ApiError::request_timeout("request header", std::time::Duration::from_secs(1)),
        ApiError::malformed_http("x"),
        ApiError::headers_too_large("x"),
        ApiError::credential_unavailable("p", &CredentialError::InvalidUpstreamPath),
        ApiError::invalid_api_key("x".into()),
        ApiError::alias_not_allowed("svc", "fast"),
        ApiError::client_rate_limited("svc", "max_inflight", 1, 1),
        ApiError::internal(),
    ];
    all.extend(ErrorKind::ALL.map(|kind| ApiError::upstream("p", kind, "x")));
    all
}

#[test]
fn the_readme_error_table_is_every_error_sturnus_answers() {
    let errors = table_after("| case | status | `code` |");
    let mut listed = std::collections::BTreeSet::new();
    for row in &errors {
        let codes = code_spans(&row[2]).into_iter();
        listed.extend(codes.filter(|c| c.chars().all(|c| c.is_ascii_lowercase() || c == '_')));
    }
    for err in every_error() {
        let status = err.status.to_string();
        let found = errors.iter().any(|row| {
            row[1].contains(&status)
                && match err.code {
                    Some(code) => code_spans(&row[2]).contains(&code),
                    None => row[2].starts_with('—'),
                }
        });
        assert!(
            found,
            "README's error table has no row for {} {:?}",
            err.status, err.code
        );
        if let Some(code) = err.code {
            listed.remove(code);
        }
    }
    assert!(
        listed.is_empty(),
        "README's error table names codes sturnus never answers: {listed:?}"
    );
}
