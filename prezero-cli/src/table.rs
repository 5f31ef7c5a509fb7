//! Column-padded text tables, printed a line at a time: a benchmark shows
//! each row as soon as it is measured, so the widths are fixed up front, never
//! fitted to the contents (a longer cell pushes the rest of its line right).

#[derive(Clone, Copy)]
enum Align {
    Left,
    Right,
}

#[derive(Clone, Copy)]
struct Column {
    /// What stands before the column, when not the table's separator.
    before: Option<&'static str>,
    width: usize,
    align: Align,
}

/// A table's columns: their widths, alignment and what stands between them.
#[derive(Clone)]
pub struct Table {
    sep: &'static str,
    columns: Vec<Column>,
    gap: Option<&'static str>,
}

impl Table {
    /// A table with no columns yet, `sep` between the columns it gets.
    pub fn new(sep: &'static str) -> Table {
        Table {
            sep,
            columns: Vec::new(),
            gap: None,
        }
    }

    /// `text` before the next column instead of the separator (before the
    /// first column: an indent).
    pub fn gap(mut self, text: &'static str) -> Table {
        self.gap = Some(text);
        self
    }

    /// A left-aligned column of `width` characters.
    pub fn left(self, width: usize) -> Table {
        self.column(width, Align::Left)
    }

    /// A right-aligned column of `width` characters.
    pub fn right(self, width: usize) -> Table {
        self.column(width, Align::Right)
    }

    fn column(mut self, width: usize, align: Align) -> Table {
        self.columns.push(Column {
            before: self.gap.take(),
            width,
            align,
        });
        self
    }

    /// One line: each cell padded to its column. A line may have fewer cells
    /// than the table has columns; it ends after its last cell.
    pub fn line<S: AsRef<str>>(&self, cells: &[S]) -> String {
        assert!(
            cells.len() <= self.columns.len(),
            "a line has a cell for each column at most"
        );
        let mut out = String::new();
        for (i, (c, cell)) in self.columns.iter().zip(cells).enumerate() {
            let before = c.before.unwrap_or(if i == 0 { "" } else { self.sep });
            let (cell, w) = (cell.as_ref(), c.width);
            out.push_str(before);
            out.push_str(&match c.align {
                Align::Left => format!("{cell:<w$}"),
                Align::Right => format!("{cell:>w$}"),
            });
        }
        out
    }

    /// Prints [`Table::line`] of `cells` on stdout.
    pub fn print<S: AsRef<str>>(&self, cells: &[S]) {
        println!("{}", self.line(cells));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_pad_as_format_does() {
        let t = Table::new(" ").left(6).right(5).gap("  ").right(4);
        assert_eq!(
            t.line(&["a", "1.5", "x"]),
            format!("{:<6} {:>5}  {:>4}", "a", "1.5", "x")
        );
        // Fewer cells: the line ends after the last; a long cell is not cut.
        assert_eq!(t.line(&["label", "123456"]), "label  123456");
        let packed = Table::new("").gap("  ").left(3).right(3);
        assert_eq!(packed.line(&["ab", "c"]), "  ab   c");
    }
}
