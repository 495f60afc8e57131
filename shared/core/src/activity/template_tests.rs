//! Unit tests of the template syntax.

use serde_json::{json, Map, Value};

use super::*;

fn map(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => panic!("an object"),
    }
}

fn fixtures() -> (Map<String, Value>, Map<String, Value>) {
    let inputs = map(json!({
        "x": "hello world",
        "count": 3,
        "flag": true,
        "nothing": null,
        "items": ["a", {"b": 2}],
        "payload": {"name": "Ada", "tags": ["x"]},
        "path": "a/b?c=d&e"
    }));
    let variables = map(json!({"user": {"id": 42, "name": "Émile"}, "token": "t"}));
    (inputs, variables)
}

#[test]
fn plain_strings_interpolate_values_strings_unquoted() {
    let (inputs, variables) = fixtures();
    let scope = Scope::new(&inputs, &variables);
    let rendered = render_string(
        "{{inputs.x}} n={{ inputs.count }} f={{inputs.flag}} z={{inputs.nothing}} u={{variables.user.id}}",
        &scope,
        Encoding::Plain,
    )
    .unwrap();
    assert_eq!(rendered, "hello world n=3 f=true z=null u=42");
    assert_eq!(render_string("no placeholders { } }}", &scope, Encoding::Plain).unwrap(), "no placeholders { } }}");
    assert_eq!(render_string("{{inputs.items.1.b}}", &scope, Encoding::Plain).unwrap(), "2");
    assert_eq!(render_string("{{inputs.payload}}", &scope, Encoding::Plain).unwrap(), r#"{"name":"Ada","tags":["x"]}"#);
}

#[test]
fn url_component_encoding_encodes_values_only() {
    let (inputs, variables) = fixtures();
    let scope = Scope::new(&inputs, &variables);
    let rendered = render_string(
        "https://api.test/items/{{inputs.path}}?q={{inputs.x}}&n={{variables.user.name}}",
        &scope,
        Encoding::UrlComponent,
    )
    .unwrap();
    assert_eq!(rendered, "https://api.test/items/a%2Fb%3Fc%3Dd%26e?q=hello%20world&n=%C3%89mile");
}

#[test]
fn a_lone_placeholder_keeps_the_json_type() {
    let (inputs, variables) = fixtures();
    let scope = Scope::new(&inputs, &variables);
    let body = json!({
        "count": "{{inputs.count}}",
        "padded": "{{ inputs.count }}",
        "text": "n={{inputs.count}}",
        "payload": "{{inputs.payload}}",
        "list": ["{{inputs.flag}}", "{{variables.user}}", 7],
        "{{inputs.x}}": "keys are not rendered"
    });
    let rendered = render_value(&body, &scope).unwrap();
    assert_eq!(
        rendered,
        json!({
            "count": 3,
            "padded": 3,
            "text": "n=3",
            "payload": {"name": "Ada", "tags": ["x"]},
            "list": [true, {"id": 42, "name": "Émile"}, 7],
            "{{inputs.x}}": "keys are not rendered"
        })
    );
    // Two placeholders side by side are not "exactly one".
    assert_eq!(render_value(&json!("{{inputs.count}}{{inputs.count}}"), &scope).unwrap(), json!("33"));
}

#[test]
fn unresolved_names_name_the_field_and_the_name() {
    let (inputs, variables) = fixtures();
    let scope = Scope::new(&inputs, &variables);
    let error = render_value(&json!({"a": {"b/c": ["ok", "{{variables.user.email}}"]}}), &scope).unwrap_err();
    assert_eq!(error.path, "/a/b~1c/1");
    assert_eq!(error.name, "variables.user.email");
    let run_error = error.prefixed("/config/body").to_run_error();
    assert_eq!(run_error.code, "validation_error");
    assert!(run_error.message.contains("variables.user.email"), "{}", run_error.message);
    assert_eq!(run_error.details, Some(json!({"path": "/config/body/a/b~1c/1", "name": "variables.user.email"})));

    for missing in ["{{inputs.absent}}", "{{inputs.x.deeper}}", "{{inputs.items.9}}", "{{inputs.items.x}}"] {
        let error = render_string(missing, &scope, Encoding::Plain).unwrap_err();
        assert!(error.message.starts_with("unresolved template name"), "{missing}: {}", error.message);
        assert_eq!(error.path, "");
    }
}

#[test]
fn syntax_errors_are_template_errors() {
    let (inputs, variables) = fixtures();
    let scope = Scope::new(&inputs, &variables);
    let unknown_root = render_string("x {{secrets.key}}", &scope, Encoding::Plain).unwrap_err();
    assert_eq!(unknown_root.name, "secrets.key");
    assert!(unknown_root.message.contains("inputs."), "{}", unknown_root.message);

    let unterminated = render_string("a {{inputs.x", &scope, Encoding::Plain).unwrap_err();
    assert_eq!(unterminated.name, "{{inputs.x");
    assert!(unterminated.message.contains("unterminated"), "{}", unterminated.message);

    for bad in ["{{inputs}}", "{{inputs.}}", "{{inputs..x}}", "{{}}", "{{inputs.a b}}"] {
        assert!(render_string(bad, &scope, Encoding::Plain).is_err(), "{bad}");
        assert!(check_string(bad).is_err(), "{bad}");
    }
}

#[test]
fn check_finds_syntax_errors_without_a_scope() {
    assert!(check_string("{{inputs.anything}} and {{variables.a.b}}").is_ok());
    let error = check_value(&json!({"list": [1, "{{env.HOME}}"]})).unwrap_err();
    assert_eq!(error.path, "/list/1");
    assert_eq!(error.name, "env.HOME");
    assert!(has_placeholders("a {{b"));
    assert!(!has_placeholders("a { b }"));
}
