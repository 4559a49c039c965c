#include "shell/figure_export.h"

#include "attnlens/analysis/report.h"

#include <QBuffer>
#include <QFileInfo>
#include <QImage>
#include <QPageSize>
#include <QPdfWriter>
#include <QSvgGenerator>
#include <cmath>

#include "attnlens/io/atomic_file.h"
#include "attnlens/io/error.h"
#include "views/plot_view.h"

namespace attnlens::gui {

FigureFormat figureFormatFromPath(const QString& path) {
    const QString ext = QFileInfo(path).suffix().toLower();
    if (ext == QStringLiteral("png")) return FigureFormat::Png;
    if (ext == QStringLiteral("svg")) return FigureFormat::Svg;
    if (ext == QStringLiteral("pdf")) return FigureFormat::Pdf;
    throwUsage("figure file \"" + path.toStdString() + "\": unknown format \"." + ext.toStdString() +
               "\" (use .png, .svg or .pdf)");
}

QString figureExtension(FigureFormat f) {
    switch (f) {
        case FigureFormat::Png:
            return QStringLiteral("png");
        case FigureFormat::Svg:
            return QStringLiteral("svg");
        case FigureFormat::Pdf:
            return QStringLiteral("pdf");
    }
    return {};
}

QByteArray renderFigure(PlotView& view, FigureFormat format, const FigureOptions& options) {
    view.refreshNow();
    QCustomPlot* plot = view.plot();
    QSize size = options.size.isEmpty() ? plot->size() : options.size;
    if (size.width() < 16 || size.height() < 16) size = QSize(1000, 760);
    const int w = size.width(), h = size.height();
    view.prepareForSize(w, h);

    QByteArray bytes;
    QBuffer buffer(&bytes);
    buffer.open(QIODevice::WriteOnly);
    const QString title = QStringLiteral("AttnLens — %1").arg(view.viewTitle());
    switch (format) {
        case FigureFormat::Png: {
            const int dpi = std::clamp(options.dpi, 24, 1200);
            const double scale = dpi / 96.0;
            QImage image = plot->toPixmap(w, h, scale).toImage();
            const int dpm = int(std::lround(dpi / 0.0254));
            image.setDotsPerMeterX(dpm);
            image.setDotsPerMeterY(dpm);
            image.setText(QStringLiteral("Title"), title);
            image.setText(QStringLiteral("Software"), QStringLiteral("AttnLens " ATTNLENS_VERSION));
            if (!image.save(&buffer, "PNG")) throwOutput("could not encode the PNG image");
            break;
        }
        case FigureFormat::Svg: {
            QSvgGenerator svg;
            svg.setOutputDevice(&buffer);
            svg.setSize(QSize(w, h));
            svg.setViewBox(QRect(0, 0, w, h));
            // Fonts are sized in points; the screen's DPI keeps text the size it has on screen.
            svg.setResolution(plot->logicalDpiX());
            // QSvgGenerator writes title and description into <title> and <desc> as they are: text
            // in a file format is escaped by whoever puts it there ("Entropy & negative mass").
            svg.setTitle(title.toHtmlEscaped());
            svg.setDescription(QStringLiteral("Exported by AttnLens " ATTNLENS_VERSION).toHtmlEscaped());
            QCPPainter painter;
            if (!painter.begin(&svg)) throwOutput("could not start the SVG painter");
            painter.setMode(QCPPainter::pmVectorized);
            plot->toPainter(&painter, w, h);
            painter.end();
            break;
        }
        case FigureFormat::Pdf: {
            QPdfWriter pdf(&buffer);
            pdf.setCreator(QStringLiteral("AttnLens " ATTNLENS_VERSION));
            pdf.setTitle(title);
            const int dpi = plot->logicalDpiX();
            pdf.setResolution(dpi);
            pdf.setPageSize(
                QPageSize(QSizeF(w * 72.0 / dpi, h * 72.0 / dpi), QPageSize::Point, QString(), QPageSize::ExactMatch));
            pdf.setPageMargins(QMarginsF(0, 0, 0, 0));
            QCPPainter painter;
            if (!painter.begin(&pdf)) throwOutput("could not start the PDF painter");
            painter.setMode(QCPPainter::pmVectorized);
            painter.setMode(QCPPainter::pmNoCaching);
            painter.setWindow(0, 0, w, h);
            plot->toPainter(&painter, w, h);
            painter.end();
            break;
        }
    }
    buffer.close();
    // toPixmap/toPainter replace the viewport; the on-screen plot needs a fresh layout.
    plot->replot(QCustomPlot::rpQueuedReplot);
    if (bytes.isEmpty()) throwOutput("the figure came out empty");
    return bytes;
}

void exportFigure(PlotView& view, const QString& path, const FigureOptions& options) {
    // The one atomic write of the project (analysis/report.h), as for every JSON the CLI writes.
    writeFileAtomically(path.toStdString(), renderFigure(view, figureFormatFromPath(path), options).toStdString());
}

}  // namespace attnlens::gui
