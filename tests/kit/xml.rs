//! XML answers (OCS, WebDAV multistatus) read as a tree of elements, for tests that check them
//! field by field.

use anyhow::Context as _;
use quick_xml::events::Event;

/// An XML element: its (prefixed) name, its text, its children in order.
#[derive(Debug, Default)]
pub struct Element {
    pub name: String,
    pub text: String,
    pub children: Vec<Element>,
}

impl Element {
    /// The root element of `xml`; an error when it is not well formed.
    pub fn parse(xml: &str) -> anyhow::Result<Element> {
        let mut reader = quick_xml::Reader::from_str(xml);
        let mut stack = vec![Element::default()];
        loop {
            match reader.read_event()? {
                Event::Start(e) => stack.push(Element {
                    name: e.name().as_ref().to_owned(),
                    ..Element::default()
                }),
                Event::Empty(e) => {
                    let el = Element {
                        name: e.name().as_ref().to_owned(),
                        ..Element::default()
                    };
                    stack.last_mut().context("unbalanced")?.children.push(el);
                }
                Event::End(_) => {
                    let done = stack.pop().context("unbalanced")?;
                    stack.last_mut().context("unbalanced")?.children.push(done);
                }
                Event::Text(t) => {
                    let text = t.xml10_content();
                    stack.last_mut().context("unbalanced")?.text.push_str(&text);
                }
                Event::GeneralRef(r) => {
                    let c = match &*r {
                        "lt" => '<',
                        "gt" => '>',
                        "amp" => '&',
                        "quot" => '"',
                        "apos" => '\'',
                        other => anyhow::bail!("unexpected entity {other}"),
                    };
                    stack.last_mut().context("unbalanced")?.text.push(c);
                }
                Event::Eof => break,
                _ => {}
            }
        }
        anyhow::ensure!(stack.len() == 1, "unclosed elements");
        let mut doc = stack.pop().context("empty")?;
        anyhow::ensure!(doc.children.len() == 1, "one root element");
        doc.children.pop().context("no root")
    }

    /// The descendant at a slash-separated path of child names.
    pub fn at(&self, path: &str) -> anyhow::Result<&Element> {
        let mut here = self;
        for step in path.split('/') {
            here = here
                .children
                .iter()
                .find(|c| c.name == step)
                .with_context(|| format!("no <{step}> on the way to {path} in <{}>", here.name))?;
        }
        Ok(here)
    }

    /// The text of the descendant at `path`.
    pub fn text_at(&self, path: &str) -> anyhow::Result<&str> {
        Ok(self.at(path)?.text.as_str())
    }
}

/// One `<d:response>` of a WebDAV multistatus: its href, the text of each property found in a
/// 200 propstat (a property with children, such as `oc:checksums`, as their texts joined by a
/// space), and whether it is a collection.
#[derive(Debug)]
pub struct DavResponse {
    pub href: String,
    pub props: std::collections::BTreeMap<String, String>,
    pub collection: bool,
}

impl DavResponse {
    /// A property's text; empty when it was not found.
    pub fn prop(&self, name: &str) -> &str {
        self.props.get(name).map_or("", String::as_str)
    }

    /// The last segment of its href (a trash key, a file name, a version key).
    pub fn last(&self) -> &str {
        self.href
            .trim_end_matches('/')
            .rsplit('/')
            .next()
            .unwrap_or_default()
    }
}

/// The responses of a multistatus body, in order; an error when it is not one.
pub fn multistatus(xml: &str) -> anyhow::Result<Vec<DavResponse>> {
    let doc = Element::parse(xml)?;
    anyhow::ensure!(doc.name == "d:multistatus", "not a multistatus: {xml:.300}");
    let mut out = Vec::new();
    for resp in doc.children.iter().filter(|c| c.name == "d:response") {
        let mut entry = DavResponse {
            href: resp.text_at("d:href")?.to_owned(),
            props: Default::default(),
            collection: false,
        };
        for stat in resp.children.iter().filter(|c| c.name == "d:propstat") {
            if !stat.text_at("d:status")?.contains(" 200 ") {
                continue;
            }
            for p in &stat.at("d:prop")?.children {
                if p.name == "d:resourcetype" {
                    entry.collection = p.children.iter().any(|c| c.name == "d:collection");
                }
                let text = if p.children.is_empty() {
                    p.text.clone()
                } else {
                    p.children
                        .iter()
                        .map(|c| c.text.as_str())
                        .collect::<Vec<_>>()
                        .join(" ")
                };
                entry.props.insert(p.name.clone(), text);
            }
        }
        out.push(entry);
    }
    Ok(out)
}
