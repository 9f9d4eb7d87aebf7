//! Lists that come in pages: every page followed, within caps on pages, items and bytes, so a
//! server that pages forever or answers with gigabytes is stopped with an error that says so.

use super::*;

/// A page of a paginated list.
pub(super) trait Page {
    type Item;
    fn split(self) -> (Vec<Self::Item>, Option<String>);
}

macro_rules! page {
    ($result:ty, $items:ident, $item:ty) => {
        impl Page for $result {
            type Item = $item;
            fn split(self) -> (Vec<$item>, Option<String>) {
                (self.$items, self.next_cursor)
            }
        }
    };
}
page!(rmcp::model::ListToolsResult, tools, rmcp::model::Tool);
page!(rmcp::model::ListPromptsResult, prompts, rmcp::model::Prompt);
page!(
    rmcp::model::ListResourcesResult,
    resources,
    rmcp::model::Resource
);
page!(
    rmcp::model::ListResourceTemplatesResult,
    resource_templates,
    rmcp::model::ResourceTemplate
);

/// The most pages one listing may take: far beyond any real server, near enough that a server
/// whose cursors never end is stopped before it costs much memory.
const MAX_PAGES: usize = 1_000;

/// The most items one listing may hold (tools, resources, prompts): ten times the largest real
/// catalogue we know (BFCL's 1,853 tools in one server).
pub const MAX_LISTED_ITEMS: usize = 20_000;

/// The most bytes (as JSON) one listing may hold: a catalogue past it costs gigabytes of
/// memory and minutes of indexing before the first request.
pub const MAX_LISTED_BYTES: usize = 16 * 1024 * 1024;

/// Counts what is written to it.
struct Tally(usize);

impl std::io::Write for Tally {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len();
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The listing, `count` items with `page` the last of them, is past a cap: why, in words.
/// `bytes` carries the size of the pages before.
fn over_caps<T: serde::Serialize>(count: usize, bytes: &mut usize, page: &[T]) -> Option<String> {
    if count > MAX_LISTED_ITEMS {
        return Some(format!(
            "the server listed more than {MAX_LISTED_ITEMS} items, the most one server may list"
        ));
    }
    let mut tally = Tally(0);
    for item in page {
        let _ = serde_json::to_writer(&mut tally, item);
    }
    *bytes += tally.0;
    (*bytes > MAX_LISTED_BYTES).then(|| {
        format!(
            "the listing is over {} MiB, the most one server may list",
            MAX_LISTED_BYTES / (1024 * 1024)
        )
    })
}

/// Every page of a list. Unlike rmcp's `list_all_*`, stops a server that repeats a cursor or
/// pages without end (those would otherwise grow the list until the request timed out).
pub(super) async fn all_pages<P: Page, Fut>(
    mut list: impl FnMut(Option<rmcp::model::PaginatedRequestParams>) -> Fut,
) -> Result<Vec<P::Item>, ServiceError>
where
    Fut: Future<Output = Result<P, ServiceError>>,
    P::Item: serde::Serialize,
{
    let params = |cursor| Some(rmcp::model::PaginatedRequestParams::default().with_cursor(cursor));
    let (mut items, mut cursor) = list(params(None)).await?.split();
    let mut bytes = 0;
    let too_big = |why: String| {
        ServiceError::McpError(rmcp::ErrorData::internal_error(
            format!("listing refused: {why}"),
            None,
        ))
    };
    if let Some(why) = over_caps(items.len(), &mut bytes, &items) {
        return Err(too_big(why));
    }
    let mut seen = std::collections::HashSet::new();
    while let Some(next) = cursor {
        let broken = if !seen.insert(next.clone()) {
            Some(format!("the server sent the cursor \"{next}\" twice"))
        } else if seen.len() >= MAX_PAGES {
            Some(format!("the listing did not end after {MAX_PAGES} pages"))
        } else {
            None
        };
        if let Some(why) = broken {
            return Err(ServiceError::McpError(rmcp::ErrorData::internal_error(
                format!("pagination that never ends: {why}"),
                None,
            )));
        }
        let (page, next) = list(params(Some(next))).await?.split();
        if let Some(why) = over_caps(items.len() + page.len(), &mut bytes, &page) {
            return Err(too_big(why));
        }
        items.extend(page);
        cursor = next;
    }
    Ok(items)
}
