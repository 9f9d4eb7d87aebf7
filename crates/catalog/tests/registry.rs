//! The catalogue over a live registry: a server added while the others run brings its tools
//! on the next refresh, and a server removed takes them along.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::sync::Arc;

use serde_json::json;
use test_support::{everything_stdio, time_stdio};
use tether_catalog::ToolCatalog;
use tether_mcp::config::adhoc_stdio;
use tether_mcp::{HeadlessHost, ServerRegistry};

fn names(catalog: &ToolCatalog) -> Vec<String> {
    catalog
        .snapshot()
        .tools()
        .iter()
        .map(|t| t.qualified_name.clone())
        .collect()
}

#[tokio::test]
async fn servers_added_and_removed_while_running_change_the_catalogue() {
    let host = Arc::new(HeadlessHost);
    let time = adhoc_stdio(&time_stdio(), &[]).unwrap();
    let mut registry = ServerRegistry::start(vec![time], host.clone()).await;
    let (catalog, errors) = ToolCatalog::load(&registry).await;
    assert!(errors.is_empty(), "{errors:?}");
    assert!(names(&catalog).iter().all(|n| n.starts_with("time__")));
    assert!(
        catalog.refresh(&registry).await.is_none(),
        "nothing changed yet"
    );

    let everything = adhoc_stdio(&everything_stdio(), &["time".into()]).unwrap();
    assert_eq!(everything.name, "everything");
    let added = registry
        .add(everything.clone(), host.clone())
        .await
        .unwrap();
    assert_eq!(added.name(), "everything");
    let clash = registry.add(everything, host.clone()).await.unwrap_err();
    assert!(clash.to_string().contains("already"), "{clash}");
    let refresh = catalog.refresh(&registry).await.unwrap();
    assert_eq!(refresh.servers, ["everything"]);
    assert!(names(&catalog).contains(&"everything__get-sum".to_string()));
    assert!(names(&catalog).contains(&"time__get_current_time".to_string()));

    // The server that was running all along still answers.
    let utc = json!({"timezone": "UTC"}).as_object().cloned();
    let result = registry
        .connection("time")
        .unwrap()
        .call_tool("get_current_time", utc, None)
        .await
        .unwrap();
    assert!(!result.is_error);

    registry.remove("everything").await.unwrap();
    assert!(registry.connection("everything").is_err());
    let refresh = catalog.refresh(&registry).await.unwrap();
    assert_eq!(refresh.servers, ["everything"]);
    assert!(names(&catalog).iter().all(|n| n.starts_with("time__")));
    let again = registry.remove("everything").await.unwrap_err();
    assert!(again.to_string().contains("everything"), "{again}");
    registry.shutdown().await;
}
