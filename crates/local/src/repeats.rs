//! Items a small model wrote twice in one call. Given room for up to three items, the 135M
//! model fills it by repetition: `"observations": ["GreenTea", "GreenTea", "GreenTea"]`, the
//! same relation three times. A repeated text or object in a list is never what a person
//! asked for, so the copies go; repeated numbers stay ("add 2, 2 and 3").

use serde_json::Value;

/// `arguments` (a JSON object) with the repeated texts and objects of its lists, at any
/// depth, dropped after their first appearance. `None` when nothing repeated.
pub(crate) fn without_repeats(arguments: &str) -> Option<String> {
    let mut value: Value = serde_json::from_str(arguments).ok()?;
    drop_repeats(&mut value).then(|| value.to_string())
}

/// Drops the repeats inside `value`; whether any went.
fn drop_repeats(value: &mut Value) -> bool {
    match value {
        Value::Array(items) => {
            let mut dropped = false;
            let mut kept: Vec<Value> = Vec::with_capacity(items.len());
            for mut item in std::mem::take(items) {
                dropped |= drop_repeats(&mut item);
                let repeatable = item.is_number() || item.is_boolean() || item.is_null();
                if !repeatable && kept.contains(&item) {
                    dropped = true;
                } else {
                    kept.push(item);
                }
            }
            *items = kept;
            dropped
        }
        Value::Object(fields) => fields
            .values_mut()
            .fold(false, |dropped, field| drop_repeats(field) | dropped),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn repeated_texts_and_objects_go_numbers_stay() {
        let arguments = json!({"entities": [{"name": "Bob", "observations": ["GreenTea", "GreenTea", "likes tea"]}, {"name": "Bob", "observations": ["GreenTea", "GreenTea", "likes tea"]}], "numbers": [2, 2, 3]});
        let revised: Value =
            serde_json::from_str(&without_repeats(&arguments.to_string()).unwrap()).unwrap();
        assert_eq!(
            revised,
            json!({"entities": [{"name": "Bob", "observations": ["GreenTea", "likes tea"]}], "numbers": [2, 2, 3]})
        );
        assert_eq!(
            without_repeats(&json!({"paths": ["a", "b"], "n": [1, 1]}).to_string()),
            None
        );
    }
}
