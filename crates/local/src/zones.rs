//! Time zones a small model may name: when the question names places with a time zone of
//! their own ("Tokyo", "New York", "Japan"), a string parameter that holds a time zone
//! (`timezone`, `source_timezone`, `tz`, …) is narrowed to those zones' IANA names, so the
//! grammar cannot produce "UTC" for Tokyo's time or an invented zone. Places come from the
//! system's tz database tables (`zone1970.tab`, `iso3166.tab`); without them nothing is
//! narrowed. A call that gives one of those zones to every zone parameter of a tool taking
//! several (`source_timezone`, `target_timezone`) when the question names several gets them
//! in the question's order instead ([`distinct_zones`]).

use std::path::Path;
use std::sync::OnceLock;

use serde_json::{Value, json};
use tether_protocol::chat::ToolDefinition;

use crate::narrowing::{edit_properties, is_free, spaced_words};

/// Where the tz database's tables live on Linux and macOS.
const ZONEINFO: &str = "/usr/share/zoneinfo";

/// A place a question may name, and its zone.
#[derive(Debug, Clone, PartialEq)]
struct Place {
    /// Lowercase words: a zone's city ("new york") or a country with one zone ("japan").
    name: String,
    zone: String,
}

/// The places of the system's tz database, read once.
fn places() -> &'static [Place] {
    static PLACES: OnceLock<Vec<Place>> = OnceLock::new();
    PLACES.get_or_init(|| read_places(Path::new(ZONEINFO)))
}

/// Cities of `zone1970.tab`, and countries of `iso3166.tab` that have exactly one zone.
fn read_places(dir: &Path) -> Vec<Place> {
    let zones = std::fs::read_to_string(dir.join("zone1970.tab")).unwrap_or_default();
    let countries = std::fs::read_to_string(dir.join("iso3166.tab")).unwrap_or_default();
    parse_places(&zones, &countries)
}

fn parse_places(zones: &str, countries: &str) -> Vec<Place> {
    let rows: Vec<(Vec<&str>, &str)> = zones
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|line| {
            let mut fields = line.split('\t');
            let codes = fields.next()?.split(',').collect();
            let zone = fields.nth(1)?;
            Some((codes, zone))
        })
        .collect();
    let mut places: Vec<Place> = rows
        .iter()
        .filter_map(|(_, zone)| {
            let city = zone.rsplit('/').next()?;
            Some(Place {
                name: city.replace('_', " ").to_lowercase(),
                zone: (*zone).to_string(),
            })
        })
        .collect();
    for line in countries.lines().filter(|l| !l.starts_with('#')) {
        let Some((code, name)) = line.split_once('\t') else {
            continue;
        };
        let mut theirs = rows.iter().filter(|(codes, _)| codes.contains(&code));
        if let (Some((_, zone)), None) = (theirs.next(), theirs.next()) {
            places.push(Place {
                name: name.trim().to_lowercase(),
                zone: (*zone).to_string(),
            });
        }
    }
    places
}

/// The zones of the places `text` names, in the order it names them; "UTC" when it says so.
pub fn zones_named_in(text: &str) -> Vec<String> {
    named_in(text, places())
}

fn named_in(text: &str, places: &[Place]) -> Vec<String> {
    // So a place matches whole words only.
    let spaced = spaced_words(text);
    let mut found: Vec<(usize, String)> = places
        .iter()
        .filter_map(|place| {
            spaced
                .find(&format!(" {} ", place.name))
                .map(|at| (at, place.zone.clone()))
        })
        .collect();
    if let Some(at) = [" utc ", " gmt "]
        .iter()
        .filter_map(|w| spaced.find(w))
        .min()
    {
        found.push((at, "UTC".to_string()));
    }
    found.sort();
    let mut zones: Vec<String> = Vec::new();
    for (_, zone) in found {
        if !zones.contains(&zone) {
            zones.push(zone);
        }
    }
    zones
}

/// Whether a parameter of this name holds a time zone.
fn is_zone_parameter(name: &str) -> bool {
    let name = name.to_lowercase();
    name.contains("timezone") || name.contains("time_zone") || name == "tz" || name == "zone"
}

/// `tools` with each free-text time-zone parameter limited to `zones` (none: unchanged).
pub fn named_zones_only(tools: &[ToolDefinition], zones: &[String]) -> Vec<ToolDefinition> {
    if zones.is_empty() {
        return tools.to_vec();
    }
    edit_properties(tools, |_, _, properties| {
        for (name, schema) in properties.iter_mut() {
            if is_zone_parameter(name) && is_free(schema, &["string"]) {
                schema["enum"] = json!(zones);
            }
        }
    })
}

/// For each of `tools` (as narrowed) taking two or more zone parameters narrowed to the same
/// two or more zones: its name, those parameters in schema order, and the zones in the order
/// the question names them.
pub(crate) fn zone_properties(tools: &[ToolDefinition]) -> Vec<(String, Vec<String>, Vec<String>)> {
    tools
        .iter()
        .filter_map(|tool| {
            let properties = tool.parameters.get("properties")?.as_object()?;
            let mut names = Vec::new();
            let mut zones: Option<Vec<String>> = None;
            for (name, schema) in properties {
                let Some(options) = schema.get("enum").and_then(Value::as_array) else {
                    continue;
                };
                if !is_zone_parameter(name) {
                    continue;
                }
                let options: Vec<String> = options
                    .iter()
                    .filter_map(|o| o.as_str().map(str::to_string))
                    .collect();
                if zones.as_ref().is_some_and(|z| *z != options) {
                    return None;
                }
                zones = Some(options);
                names.push(name.clone());
            }
            let zones = zones.filter(|z| z.len() >= 2)?;
            (names.len() >= 2).then(|| (tool.name.clone(), names, zones))
        })
        .collect()
}

/// `arguments` (JSON) with `properties` given `zones` in order, when the model gave them all
/// the same one of `zones`: a conversion "from London to Tokyo" had been called from Tokyo to
/// Tokyo. `None` when nothing changes.
pub(crate) fn distinct_zones(
    arguments: &str,
    properties: &[String],
    zones: &[String],
) -> Option<String> {
    let mut object: serde_json::Map<String, Value> = serde_json::from_str(arguments).ok()?;
    let given: Vec<&str> = properties
        .iter()
        .map(|p| object.get(p).and_then(Value::as_str))
        .collect::<Option<_>>()?;
    let first = *given.first()?;
    if !zones.iter().any(|z| z == first) || given.iter().any(|g| *g != first) {
        return None;
    }
    for (property, zone) in properties.iter().zip(zones) {
        object.insert(property.clone(), json!(zone));
    }
    serde_json::to_string(&object).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const ZONES: &str = "#codes\tcoordinates\tTZ\tcomments\n\
        JP\t+353916+1394441\tAsia/Tokyo\n\
        GB,GG,IM,JE\t+513030-0000731\tEurope/London\n\
        US\t+404251-0740023\tAmerica/New_York\tEastern (most areas)\n\
        US\t+340308-1181434\tAmerica/Los_Angeles\tPacific\n";
    const COUNTRIES: &str = "#code\tname\nJP\tJapan\nUS\tUnited States\nGB\tBritain (UK)\n";

    fn places() -> Vec<Place> {
        parse_places(ZONES, COUNTRIES)
    }

    #[test]
    fn cities_and_single_zone_countries_name_their_zones_in_order() {
        let places = places();
        assert_eq!(
            named_in("What time is it in Tokyo?", &places),
            ["Asia/Tokyo"]
        );
        assert_eq!(
            named_in("Convert 9am New York time to London time.", &places),
            ["America/New_York", "Europe/London"]
        );
        assert_eq!(named_in("and in japan", &places), ["Asia/Tokyo"]);
        // A country with several zones names none of them; whole words only.
        assert!(named_in("time in the United States", &places).is_empty());
        assert!(named_in("Tokyoite habits", &places).is_empty());
        assert_eq!(
            named_in("12:00 UTC in Los Angeles", &places),
            ["UTC", "America/Los_Angeles"]
        );
    }

    #[test]
    fn zone_parameters_are_narrowed_and_others_left_alone() {
        let tools = vec![ToolDefinition {
            name: "time__convert_time".into(),
            description: "Convert time between timezones".into(),
            parameters: json!({"type": "object", "properties": {
                "source_timezone": {"type": "string"},
                "time": {"type": "string"},
                "target_timezone": {"type": "string"}}}),
        }];
        let zones = vec!["America/New_York".to_string(), "Europe/London".to_string()];
        let narrowed = named_zones_only(&tools, &zones);
        let properties = &narrowed[0].parameters["properties"];
        assert_eq!(properties["source_timezone"]["enum"], json!(zones));
        assert_eq!(properties["target_timezone"]["enum"], json!(zones));
        assert!(properties["time"].get("enum").is_none());
        assert_eq!(named_zones_only(&tools, &[]), tools);
    }

    #[test]
    fn without_the_tables_nothing_is_named() {
        assert!(read_places(Path::new("/nonexistent")).is_empty());
    }

    #[test]
    fn a_conversion_between_two_named_places_gets_both() {
        let tool = ToolDefinition {
            name: "time__convert_time".into(),
            description: String::new(),
            parameters: json!({"type": "object", "properties": {
                "source_timezone": {"type": "string"},
                "time": {"type": "string"},
                "target_timezone": {"type": "string"},
            }}),
        };
        let zones = vec!["Europe/London".to_string(), "Asia/Tokyo".to_string()];
        let narrowed = named_zones_only(std::slice::from_ref(&tool), &zones);
        let found = zone_properties(&narrowed);
        assert_eq!(found.len(), 1);
        let (name, properties, listed) = &found[0];
        assert_eq!(name, "time__convert_time");
        assert_eq!(properties, &["source_timezone", "target_timezone"]);
        assert_eq!(listed, &zones);
        let same = json!({"source_timezone": "Asia/Tokyo", "time": "09:00", "target_timezone": "Asia/Tokyo"});
        let fixed: Value =
            serde_json::from_str(&distinct_zones(&same.to_string(), properties, listed).unwrap())
                .unwrap();
        assert_eq!(
            fixed,
            json!({"source_timezone": "Europe/London", "time": "09:00", "target_timezone": "Asia/Tokyo"})
        );
        // Two zones the model chose apart are its own.
        let apart = json!({"source_timezone": "Asia/Tokyo", "time": "09:00", "target_timezone": "Europe/London"});
        assert_eq!(distinct_zones(&apart.to_string(), properties, listed), None);
        // One named place: nothing to tell apart.
        let one = named_zones_only(&[tool], &zones[..1]);
        assert!(zone_properties(&one).is_empty());
    }
}
