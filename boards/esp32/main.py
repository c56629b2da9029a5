# Runs at boot on the esp32 board. The application is app.mpy (boards/common),
# what is particular to this board is board.mpy; see docs/boards.md.
import board
import app

app.main(board)
