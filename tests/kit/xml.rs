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
