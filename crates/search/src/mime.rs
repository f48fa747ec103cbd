//! Media types by file extension (the index's `mime` column and what `mediatype:` matches),
//! and which files are text-like enough to have their content indexed.

/// The media type of a folder, as oCIS reports it.
pub const FOLDER: &str = "httpd/unix-directory";

const TYPES: &[(&str, &str)] = &[
    ("txt", "text/plain"),
    ("md", "text/markdown"),
    ("markdown", "text/markdown"),
    ("csv", "text/csv"),
    ("html", "text/html"),
    ("htm", "text/html"),
    ("css", "text/css"),
    ("xml", "application/xml"),
    ("json", "application/json"),
    ("yaml", "application/yaml"),
    ("yml", "application/yaml"),
    ("toml", "application/toml"),
    ("js", "text/javascript"),
    ("ts", "text/x-typescript"),
    ("rs", "text/x-rust"),
    ("go", "text/x-go"),
    ("py", "text/x-python"),
    ("java", "text/x-java"),
    ("c", "text/x-c"),
    ("h", "text/x-c"),
    ("cpp", "text/x-c++"),
    ("hpp", "text/x-c++"),
    ("sh", "application/x-sh"),
    ("rb", "text/x-ruby"),
    ("php", "application/x-php"),
    ("sql", "application/sql"),
    ("log", "text/plain"),
    ("ini", "text/plain"),
    ("pdf", "application/pdf"),
    ("doc", "application/msword"),
    (
        "docx",
        "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    ),
    ("odt", "application/vnd.oasis.opendocument.text"),
    ("rtf", "application/rtf"),
    ("xls", "application/vnd.ms-excel"),
    (
        "xlsx",
        "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
    ),
    ("ods", "application/vnd.oasis.opendocument.spreadsheet"),
    ("ppt", "application/vnd.ms-powerpoint"),
    (
        "pptx",
        "application/vnd.openxmlformats-officedocument.presentationml.presentation",
    ),
    ("odp", "application/vnd.oasis.opendocument.presentation"),
    ("png", "image/png"),
    ("jpg", "image/jpeg"),
    ("jpeg", "image/jpeg"),
    ("gif", "image/gif"),
    ("webp", "image/webp"),
    ("svg", "image/svg+xml"),
    ("mp4", "video/mp4"),
    ("webm", "video/webm"),
    ("mov", "video/quicktime"),
    ("mp3", "audio/mpeg"),
    ("ogg", "audio/ogg"),
    ("wav", "audio/wav"),
    ("flac", "audio/flac"),
    ("zip", "application/zip"),
    ("tar", "application/x-tar"),
    ("gz", "application/gzip"),
    ("tgz", "application/gzip"),
    ("7z", "application/x-7z-compressed"),
    ("rar", "application/x-rar-compressed"),
    ("bz2", "application/x-bzip2"),
];

/// The media type of a file named `name` (by its extension), or of a folder.
pub fn of(name: &str, is_dir: bool) -> &'static str {
    if is_dir {
        return FOLDER;
    }
    let Some((_, ext)) = name.rsplit_once('.') else {
        return "application/octet-stream";
    };
    let ext = ext.to_ascii_lowercase();
    TYPES
        .iter()
        .find(|(e, _)| *e == ext)
        .map_or("application/octet-stream", |(_, t)| *t)
}

/// Whether a file of this media type has its content indexed: text of any kind, and the
/// structured text formats code and configuration use.
pub fn is_text(mime: &str) -> bool {
    mime.starts_with("text/")
        || matches!(
            mime,
            "application/json"
                | "application/xml"
                | "application/yaml"
                | "application/toml"
                | "application/x-sh"
                | "application/x-php"
                | "application/sql"
        )
}

#[cfg(test)]
mod tests {
    #[test]
    fn types_by_extension() {
        assert_eq!(super::of("a.MD", false), "text/markdown");
        assert_eq!(super::of("a", false), "application/octet-stream");
        assert_eq!(super::of("a.txt", true), super::FOLDER);
        assert!(super::is_text("text/x-rust"));
        assert!(!super::is_text("image/png"));
    }
}
